/**
 * What a test knows of the ledger's clock (NOW(6), µs) from the dates it reads (whole ms) and from reading the
 * clock around a call: bounds on an instant, and whether a call's statements surely, surely not or maybe saw it
 * pass. The conformance model (ledger-model.ts) and its checks (test/conformance/) reason with them.
 */

/** Dates carry whole ms, the ledger's clock µs: a read `v` means an instant within [v - SLACK_MS, v + SLACK_MS]. */
export const SLACK_MS = 1;

/** An instant of the ledger's clock, known to lie within [lo, hi] (ms). */
export interface Instant {
  lo: number;
  hi: number;
}

/** The ledger's clock read just before and just after a call: every NOW(6) of the call lies between. */
export interface Bracket {
  before: number;
  after: number;
}

export type Tri = 'yes' | 'no' | 'maybe';

export function readInstant(d: Date): Instant {
  return { lo: d.getTime() - SLACK_MS, hi: d.getTime() + SLACK_MS };
}

/** NOW(6) + ms, evaluated by a statement of a call within `b`. */
export function nowPlus(b: Bracket, ms: number): Instant {
  return { lo: b.before - SLACK_MS + ms, hi: b.after + SLACK_MS + ms };
}

/**
 * Whether NOW(6) of a statement within `b` has passed `i` (`i <= NOW(6)`, or `<`: the bounds
 * are loose enough for both).
 */
export function reached(i: Instant, b: Bracket): Tri {
  if (i.hi < b.before - SLACK_MS) return 'yes';
  if (i.lo > b.after + SLACK_MS) return 'no';
  return 'maybe';
}

export function within(d: Date, i: Instant): boolean {
  return d.getTime() >= i.lo - SLACK_MS && d.getTime() <= i.hi + SLACK_MS;
}
