import { describe, expect, test } from 'vitest';
import type { ClaimedItem } from '../src/ledger/types.js';
import { PrefetchBuffer } from '../src/consumer/prefetch-buffer.js';

// The buffer holds no I/O, so these need no server: only ids matter to it.
const item = (id: string): ClaimedItem => ({ id }) as ClaimedItem;
const ids = (ps: readonly { item: ClaimedItem }[]): string[] => ps.map((p) => p.item.id);

describe('PrefetchBuffer', () => {
  test('wants nothing before a handler settles, then what the slots start within the horizon, up to the limit', () => {
    const b = new PrefetchBuffer({ concurrency: 4, limit: 100, leaseMs: 30_000 });
    expect(b.target()).toBe(0);
    b.noteHandlerMs(50); // 250 ms horizon / 50 ms = 5 per slot, 4 slots
    expect(b.target()).toBe(20);
    const capped = new PrefetchBuffer({ concurrency: 4, limit: 8, leaseMs: 30_000 });
    capped.noteHandlerMs(50);
    expect(capped.target()).toBe(8);
    const off = new PrefetchBuffer({ concurrency: 4, limit: 0, leaseMs: 30_000 });
    off.noteHandlerMs(0);
    expect(off.target()).toBe(0);
  });

  test('slow handlers get no buffer; the average follows newer handler times a tenth at a time', () => {
    const b = new PrefetchBuffer({ concurrency: 2, limit: 100, leaseMs: 30_000 });
    b.noteHandlerMs(1000);
    expect(b.target()).toBe(0);
    b.noteHandlerMs(0); // 1000 + (0 - 1000) * 0.1 = 900
    expect(b.target()).toBe(0);
    // 900 ms decays towards 10 ms: 10 + 890 * 0.9^n, so 2 slots * 250 / that approaches 50 from below.
    for (let i = 0; i < 10; i++) b.noteHandlerMs(10);
    expect(b.target()).toBe(Math.floor((2 * 250) / (10 + 890 * 0.9 ** 10)));
    for (let i = 0; i < 100; i++) b.noteHandlerMs(10);
    expect(b.target()).toBe(49);
  });

  test(
    'slow claims shrink the buffer to what starts within what is ' +
      'left of a third of the lease, and turn it off at a third',
    () => {
      // A 900 ms lease: an item may wait 300 ms from its claim's start, less what the claim itself took.
      const b = new PrefetchBuffer({ concurrency: 1, limit: 100, leaseMs: 900 });
      b.noteHandlerMs(10);
      expect(b.target()).toBe(25); // 250 ms horizon / 10 ms
      // A slower claim counts at once: 100 ms left.
      expect(b.noteClaimMs(200, 0)).toBe(false);
      expect(b.target()).toBe(10);
      // A faster one brings it down by 0.3 of the difference: 200 - 30 = 170 ms, 130 ms left.
      b.noteClaimMs(100, 0);
      expect(b.target()).toBe(13);
      // A claim of a third of the lease turns prefetch off at once, and is reported once a minute.
      expect(b.noteClaimMs(400, 1_000)).toBe(true);
      expect(b.target()).toBe(0);
      expect(b.noteClaimMs(400, 2_000)).toBe(false);
      expect(b.noteClaimMs(400, 61_001)).toBe(true);
      // Fast claims again: the buffer comes back.
      for (let i = 0; i < 30; i++) b.noteClaimMs(1, 62_000);
      expect(b.target()).toBe(25);
    },
  );

  test('a no-op handler time is floored, so the target stays finite', () => {
    const b = new PrefetchBuffer({ concurrency: 1, limit: Number.MAX_SAFE_INTEGER, leaseMs: 30_000 });
    b.noteHandlerMs(0);
    expect(b.target()).toBe(25_000);
  });

  test('take starts the oldest first, up to the free slots', () => {
    const b = new PrefetchBuffer({ concurrency: 4, limit: 10, leaseMs: 30_000 });
    b.push([item('a'), item('b')], 1_000);
    b.push([item('c')], 2_000);
    const first = b.take(2, 2_000);
    expect(ids(first.start)).toEqual(['a', 'b']);
    expect(first.expired).toEqual([]);
    expect(b.size).toBe(1);
    expect(b.has('c')).toBe(true);
    expect(b.has('a')).toBe(false);
    expect(ids(b.take(5, 2_000).start)).toEqual(['c']);
    expect(b.size).toBe(0);
  });

  test('an item waits at most a third of its lease; one that gets a slot starts while a third of it is left', () => {
    const b = new PrefetchBuffer({ concurrency: 4, limit: 10, leaseMs: 30_000 });
    b.push([item('old')], 0);
    b.push([item('mid')], 5_000);
    b.push([item('new')], 12_000);
    // At 15 s: `old` waited 15 s (> 10 s, a third) and `mid` 10 s; no slot is free.
    const none = b.take(0, 15_001);
    expect(ids(none.start)).toEqual([]);
    expect(ids(none.expired)).toEqual(['old', 'mid']);
    expect(ids(b.drain())).toEqual(['new']);

    b.push([item('late')], 0);
    b.push([item('later')], 10_000);
    // A free slot at 19 s: `late` is within two thirds (20 s) and starts; at 21 s it would not.
    expect(ids(b.take(1, 19_000).start)).toEqual(['late']);
    b.push([item('stale')], 0);
    const r = b.take(2, 21_000);
    expect(ids(r.expired)).toEqual(['stale']);
    expect(ids(r.start)).toEqual(['later']);
  });

  test('drain empties the buffer, oldest first', () => {
    const b = new PrefetchBuffer({ concurrency: 1, limit: 10, leaseMs: 30_000 });
    b.push([item('x'), item('y')], 0);
    expect(ids(b.drain())).toEqual(['x', 'y']);
    expect(b.size).toBe(0);
  });
});
