/** Claim modes: the named states of a consumer's claim scheduler, and the transitions each allows. */

/**
 * Where the claim scheduler is in its life (as graphile-worker's local
 * queue names its modes):
 *
 * - `new`: made; claims nothing, starts nothing;
 * - `claiming`: the consumer runs: rounds claim, buffered items start, reserved items are taken;
 * - `stopping`: the consumer stops: no new round; reserved items that still arrive go back to the ledger.
 */
export type ClaimMode = 'new' | 'claiming' | 'stopping';

/** What the last head search said: claimable heads may be there beyond the named ids (`maybe`), or not (`none`). */
export type HeadsKnown = 'maybe' | 'none';

/** The last claim round got all the room it asked for (`full`: worth a second round in parallel), or less. */
export type LastRound = 'full' | 'short';

const NEXT: Record<ClaimMode, readonly ClaimMode[]> = {
  new: ['claiming', 'stopping'],
  claiming: ['stopping'],
  stopping: [],
};

/** A transition the scheduler's own code must never make: a bug in the consumer, not in its caller's input. */
export class ClaimStateError extends Error {
  override name = 'ClaimStateError';
}

/** The mode after `from` → `to`, or a ClaimStateError if no such transition exists. */
export function nextMode(from: ClaimMode, to: ClaimMode): ClaimMode {
  if (!NEXT[from].includes(to)) throw new ClaimStateError(`claim scheduler: no transition ${from} → ${to}`);
  return to;
}

/** Asserts an invariant of the scheduler's counts (room held, rounds in flight): never negative. */
export function assertCount(name: string, n: number): number {
  if (n < 0) throw new ClaimStateError(`claim scheduler: ${name} is ${n}, below zero`);
  return n;
}

/**
 * Why no claim round may start before a time: a failed claim backs off for
 * a while; a fleet at its cap holds rounds until a moment later or until one
 * of this consumer's items finishes. Each lifts on its own; rounds wait for the later.
 */
export class ClaimHolds {
  private errorUntil = 0;
  private cappedUntil = 0;

  /** A claim round failed: back off for `ms`. */
  afterError(nowMs: number, ms: number): void {
    this.errorUntil = nowMs + ms;
  }

  /** The claim limiter found the fleet at its cap: no claim for `ms`, unless one of ours finishes. */
  capped(nowMs: number, ms: number): void {
    this.cappedUntil = nowMs + ms;
  }

  /** One of this consumer's items finished: the fleet is below its cap by one. */
  itemFinished(): void {
    this.cappedUntil = 0;
  }

  /** No round before this (ms since the epoch). */
  until(): number {
    return Math.max(this.errorUntil, this.cappedUntil);
  }
}
