import { expect, test } from 'vitest';
import { demoProgress } from '../src/demo/run-demo.js';
import {
  countLess,
  countUpTo,
  exactCount,
  formatCount,
  sumCounts,
  unfinishedCount,
} from '../src/ledger/bounded-count.js';
import { statsCountCap } from '../src/ledger/sql/operator/stats.js';
import { ITEM_STATES, type BoundedCount, type ItemState, type QueueStats } from '../src/ledger/types.js';

// Counts that stop at a cap (src/ledger/sql/stats.ts) stay floors through every sum and difference.

const exact = (count: number): BoundedCount => ({ count, atLeast: false });
const floor = (count: number): BoundedCount => ({ count, atLeast: true });

/** Counts as stats reads them from `n` items by state: each range read up to its cap (a LIMIT). */
function countsOf(n: Partial<Record<ItemState, number>>): Pick<QueueStats, 'counts'> {
  const read = (s: ItemState): number => Math.min(n[s] ?? 0, statsCountCap(s));
  return {
    counts: Object.fromEntries(
      ITEM_STATES.map((s) => [s, countUpTo(read(s), statsCountCap(s))]),
    ) as QueueStats['counts'],
  };
}

test('a count that reaches its cap is a floor; below it, exact', () => {
  expect(countUpTo(9_999, 10_000)).toEqual(exact(9_999));
  expect(countUpTo(10_000, 10_000)).toEqual(floor(10_000));
  expect(exactCount(exact(7))).toBe(7);
  expect(exactCount(floor(10_000))).toBeUndefined();
  expect(formatCount(exact(7))).toBe('7');
  expect(formatCount(floor(10_000))).toBe('10000+');
});

test('a sum with a floor in it is a floor; a difference of a floor is one too', () => {
  expect(sumCounts([exact(3), exact(4)])).toEqual(exact(7));
  expect(sumCounts([floor(10_000), exact(200)])).toEqual(floor(10_200));
  expect(sumCounts([])).toEqual(exact(0));
  // due = pending less scheduled
  expect(countLess(exact(10), exact(4))).toEqual(exact(6));
  expect(countLess(floor(100_000), exact(4))).toEqual(floor(99_996));
  expect(countLess(floor(100_000), floor(100_000))).toEqual(floor(0));
});

test('the demo is done when nothing is left unfinished, however many terminal items the caps hid', () => {
  // The run the issue saw: 19,800 completed and 200 dead, read as 10,000+ and 200.
  const ended = countsOf({ completed: 19_800, dead: 200 });
  expect(ended.counts.completed).toEqual(floor(10_000));
  expect(unfinishedCount(ended)).toEqual(exact(0));
  expect(demoProgress(ended, 20_000)).toEqual({ done: true, finished: 20_000, exact: true });

  expect(
    demoProgress(countsOf({ completed: 15_000, dead: 150, pending: 4_000, processing: 800, blocked: 50 }), 20_000),
  ).toEqual({ done: false, finished: 15_150, exact: true });
  // More unfinished than the cap counts: not done, and how many finished is only an upper bound.
  expect(demoProgress(countsOf({ pending: 150_000 }), 200_000)).toEqual({
    done: false,
    finished: 100_000,
    exact: false,
  });
  expect(demoProgress(undefined, 10)).toEqual({ done: true, finished: 10, exact: true });
});
