import { ITEM_STATES, type ItemState, type QueueStats } from '../../src/ledger/types.js';

/**
 * A queue's counts by state as plain numbers, for a test that compares them
 * whole; throws if any of them is only a floor (stopped at its cap), which
 * such a comparison would otherwise read as exact.
 */
export function exactCounts(stats: Pick<QueueStats, 'counts'> | undefined): Record<ItemState, number> | undefined {
  if (stats === undefined) return undefined;
  const floors = ITEM_STATES.filter((state) => stats.counts[state].atLeast);
  if (floors.length > 0) throw new Error(`counts of ${floors.join(', ')} stopped at their cap: not exact`);
  return Object.fromEntries(ITEM_STATES.map((state) => [state, stats.counts[state].count])) as Record<
    ItemState,
    number
  >;
}
