import type { BoundedCount, ItemState, QueueStats } from './types.js';

/**
 * Arithmetic on counts that may be floors (a bounded range that reached its
 * cap: types.ts BoundedCount). A sum or difference that involves a floor is
 * a floor too, so no reader can turn "10,000 or more" into an exact figure.
 */

/** A count known exactly. */
export function exactly(count: number): BoundedCount {
  return { count, atLeast: false };
}

/** `count` as read from a range of at most `cap` rows: a floor once it reaches the cap. */
export function countUpTo(count: number, cap: number): BoundedCount {
  return { count, atLeast: count >= cap };
}

/** The exact figure, or undefined when the count is only a floor. */
export function exactCount(c: BoundedCount): number | undefined {
  return c.atLeast ? undefined : c.count;
}

/** The sum of counts: a floor if any of them is. */
export function sumCounts(counts: readonly BoundedCount[]): BoundedCount {
  return { count: counts.reduce((n, c) => n + c.count, 0), atLeast: counts.some((c) => c.atLeast) };
}

/**
 * `whole` less `part`, where `part` counts a subset of `whole` (the due
 * pending items: pending less scheduled). Exact when both are; a floor when
 * `whole` is (and 0 or more when `part` is a floor too, since then nothing
 * is known of the rest).
 */
export function countLess(whole: BoundedCount, part: BoundedCount): BoundedCount {
  if (part.atLeast) return whole.atLeast ? { count: 0, atLeast: true } : exactly(Math.max(0, whole.count - part.count));
  return { count: Math.max(0, whole.count - part.count), atLeast: whole.atLeast };
}

/** States whose items are still to be done. */
export const UNFINISHED_STATES: readonly ItemState[] = ['pending', 'processing', 'blocked'];

/**
 * A queue's items not finished yet (pending, processing, blocked). Exactly 0 once every item reached a terminal state.
 */
export function unfinishedCount(s: Pick<QueueStats, 'counts'>): BoundedCount {
  return sumCounts(UNFINISHED_STATES.map((state) => s.counts[state]));
}

/** `1234`, or `10000+` for a floor (as `lanewake stats` prints it). */
export function formatCount(c: BoundedCount): string {
  return `${c.count}${c.atLeast ? '+' : ''}`;
}
