import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { EnqueueInput, Ledger } from '../src/ledger/ledger.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { claimAll, freshQueue, laneRow, mustGet, only } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { onEveryStatement } from './support/mysql-statements.js';
import { LANES_PER_UPSERT } from '../src/ledger/sql/enqueue/lane-sequences.js';

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

/** Claims everything claimable and checks that no lane has more than one item in the answer. */
async function claimHeads(queue: string, owner = 'w'): Promise<ClaimedItem[]> {
  const items = await claimAll(ledger, queue, owner);
  const lanes = items.filter((i) => i.lane !== null).map((i) => i.lane);
  expect(new Set(lanes).size, 'one claim must never hold two items of a lane').toBe(lanes.length);
  return items;
}

/** The one claimable item of `lane` right now (fails when there is none or more). */
async function claimLaneHead(queue: string, lane: string): Promise<ClaimedItem> {
  return only(
    (await claimHeads(queue)).filter((i) => i.lane === lane),
    `claimable items of lane ${lane}`,
  );
}

async function nothingOfLane(queue: string, lane: string): Promise<void> {
  const items = await claimHeads(queue);
  expect(items.filter((i) => i.lane === lane)).toEqual([]);
  // Release whatever else came along so it stays claimable for later steps.
  for (const i of items) await ledger.release(i);
}

describe('lane order', () => {
  test('items of one lane are claimable one at a time, in enqueue order', async () => {
    const queue = freshQueue('lane-order');
    const expected: number[] = [];
    // Enqueued singly and in batches, interleaved with another lane and lane-less items.
    for (let k = 0; k < 6; k++) {
      await ledger.enqueue({ queue, type: 't', payload: k, lane: 'L' });
      expected.push(k);
    }
    const batch: EnqueueInput[] = [];
    for (let k = 6; k < 20; k++) {
      batch.push({ queue, type: 't', payload: k, lane: 'L', priority: k % 3 === 0 ? -5 : 5 });
      batch.push({ queue, type: 't', payload: 100 + k, lane: 'M' });
      batch.push({ queue, type: 't', payload: 200 + k });
      expected.push(k);
    }
    const r = await ledger.enqueueMany(batch);
    expect(r.filter((_, i) => i % 3 === 0).map((x) => x.laneSeq)).toEqual(Array.from({ length: 14 }, (_, i) => 7 + i));

    const seen: number[] = [];
    for (let round = 0; round < 40 && seen.length < expected.length; round++) {
      const items = await claimHeads(queue);
      const ofL = items.filter((i) => i.lane === 'L');
      expect(ofL.length).toBeLessThanOrEqual(1);
      for (const i of ofL) seen.push(i.payload as number);
      // While the head runs, its lane offers nothing else.
      if (ofL.length === 1) expect((await claimHeads(queue)).filter((i) => i.lane === 'L')).toEqual([]);
      for (const i of items) expect((await ledger.complete(i)).won).toBe(true);
    }
    expect(seen).toEqual(expected);
    expect(await laneRow(ledger, queue, 'L')).toEqual({ nextSeq: 20, busy: false });
  });

  test('order holds across retries, releases, blocks, dead letters and cancels of waiting items', async () => {
    const queue = freshQueue('lane-mixed');
    const r = await ledger.enqueueMany(
      Array.from({ length: 12 }, (_, k) => ({ queue, type: 't', payload: k, lane: 'L', maxAttempts: k === 9 ? 1 : 5 })),
    );
    const id = (k: number): string => {
      const x = r[k];
      if (!x) throw new Error(`no item ${k}`);
      return x.id;
    };
    const order: number[] = [];
    const take = async (): Promise<ClaimedItem> => {
      const c = await claimLaneHead(queue, 'L');
      order.push(c.payload as number);
      return c;
    };

    // 0: retried, then runs again before 1.
    let c = await take();
    expect((await ledger.retry(c, { error: 'e', delayMs: 0 })).won).toBe(true);
    c = await take();
    expect(c.id).toBe(id(0));
    expect(c.attempt).toBe(2);
    await ledger.complete(c);

    // 1: retried with a delay: the lane waits for it rather than running 2.
    c = await take();
    await ledger.retry(c, { error: 'e', delayMs: 3_600_000 });
    await nothingOfLane(queue, 'L');
    expect((await mustGet(ledger, id(2))).isHead).toBe(false);
    // (An operator cancels the delayed head: the lane moves on to 2.)
    expect(await ledger.cancel(id(1))).toBe('cancelled');

    // 2: released, then runs again before 3.
    c = await take();
    await ledger.release(c);
    c = await take();
    expect(c.id).toBe(id(2));
    await ledger.complete(c);

    // 3: blocked: the lane waits until the dependency wakes it.
    c = await take();
    await ledger.block(c, { dependencyKey: 'lane-dep', maxWaitMs: 600_000 });
    await nothingOfLane(queue, 'L');
    expect(await ledger.wakeDependency('lane-dep')).toHaveLength(1);
    c = await take();
    expect(c.id).toBe(id(3));
    await ledger.complete(c);

    // 4: dead letter frees the lane.
    c = await take();
    await ledger.fail(c, { error: 'permanent' });

    // 5 runs while 6 and 7 (waiting) are cancelled: they are skipped.
    c = await take();
    expect(await ledger.cancel(id(6))).toBe('cancelled');
    expect(await ledger.cancel(id(7))).toBe('cancelled');
    await nothingOfLane(queue, 'L');
    await ledger.skip(c, 'nothing to do');

    // 8 is the head now; cancelled before it is claimed: 9 follows.
    expect((await mustGet(ledger, id(8))).isHead).toBe(true);
    expect(await ledger.cancel(id(8))).toBe('cancelled');

    // 9 has a budget of 1: a retry ends it dead, and 10 follows.
    c = await take();
    expect((await ledger.retry(c, { error: 'e', delayMs: 0 })).state).toBe('dead');

    // 10 is blocked, then cancelled while blocked: 11 follows.
    c = await take();
    await ledger.block(c, { dependencyKey: 'never-comes', maxWaitMs: 600_000 });
    await nothingOfLane(queue, 'L');
    expect(await ledger.cancel(id(10))).toBe('cancelled');

    c = await take();
    await ledger.complete(c);
    await nothingOfLane(queue, 'L');

    expect(order).toEqual([0, 0, 1, 2, 2, 3, 3, 4, 5, 9, 10, 11]);
    const states = await Promise.all(r.map(async (x) => (await mustGet(ledger, x.id)).state));
    expect(states).toEqual([
      'completed',
      'cancelled',
      'completed',
      'completed',
      'dead',
      'skipped',
      'cancelled',
      'cancelled',
      'cancelled',
      'dead',
      'cancelled',
      'completed',
    ]);
    expect(await laneRow(ledger, queue, 'L')).toEqual({ nextSeq: 12, busy: false });
    // The lane is idle: a new item is its head at once.
    const next = await ledger.enqueue({ queue, type: 't', payload: 12, lane: 'L' });
    expect(next.laneSeq).toBe(13);
    expect((await claimLaneHead(queue, 'L')).id).toBe(next.id);
  });

  test('an expired lease keeps the lane: the reclaimed head runs again before its successor', async () => {
    const queue = freshQueue('lane-reclaim');
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 'a', lane: 'L' },
      { queue, type: 't', payload: 'b', lane: 'L' },
    ]);
    const c = only(await ledger.claim({ queue, owner: 'dies', limit: 10, leaseMs: 150 }).then((x) => x.items));
    expect(c.id).toBe(a!.id);
    await waitFor(async () => (await ledger.reclaimExpired({ queue })).reclaimed.includes(a!.id), 10_000, 'reclaim');
    const again = await claimLaneHead(queue, 'L');
    expect(again.id).toBe(a!.id);
    await ledger.complete(again);
    expect((await claimLaneHead(queue, 'L')).id).toBe(b!.id);
  });
});

describe('lanes are independent', () => {
  test('a lane with 10,000 items does not hold back other lanes', async () => {
    const queue = freshQueue('lane-big');
    const before = await ledger.enqueueMany(
      Array.from({ length: 10 }, (_, k) => ({ queue, type: 't', payload: `before-${k}`, lane: `other-${k}` })),
    );
    for (let b = 0; b < 20; b++) {
      const r = await ledger.enqueueMany(
        Array.from({ length: 500 }, (_, k) => ({ queue, type: 't', payload: { seq: b * 500 + k }, lane: 'big' })),
      );
      expect(r[0]!.laneSeq).toBe(b * 500 + 1);
    }
    const after = await ledger.enqueueMany([
      ...Array.from({ length: 10 }, (_, k) => ({ queue, type: 't', payload: `after-${k}`, lane: `other-${10 + k}` })),
      ...Array.from({ length: 5 }, (_, k) => ({ queue, type: 't', payload: `lone-${k}` })),
    ]);
    const others = new Set([...before, ...after].map((x) => x.id));
    expect(others.size).toBe(25);

    const c = await ledger.claim({ queue, owner: 'w', limit: 100, leaseMs: 60_000 });
    const big = c.items.filter((i) => i.lane === 'big');
    expect(only(big).laneSeq).toBe(1);
    const claimedOthers = c.items.filter((i) => i.lane !== 'big').map((i) => i.id);
    expect(new Set(claimedOthers)).toEqual(others);
    expect(c.items).toHaveLength(26);
    expect(c.moreAvailable).toBe(false);

    // The big lane moves on one item at a time.
    await ledger.complete(only(big));
    const next = await ledger.claim({ queue, owner: 'w', limit: 100, leaseMs: 60_000 });
    expect(next.items.map((i) => [i.lane, i.laneSeq])).toEqual([['big', 2]]);

    // New heads of other lanes are claimable at once, even with a small limit.
    const late = await ledger.enqueueMany([
      { queue, type: 't', payload: 'late-1', lane: 'late-1' },
      { queue, type: 't', payload: 'late-2' },
    ]);
    const small = await ledger.claim({ queue, owner: 'w', limit: 2, leaseMs: 60_000 });
    expect(small.items.map((i) => i.id).sort()).toEqual(late.map((x) => x.id).sort());
    expect((await ledger.stats(queue))[0]?.counts.pending.count).toBe(9_998);
  });

  test('items without a lane are independent of each other', async () => {
    const queue = freshQueue('lane-none');
    const r = await ledger.enqueueMany(Array.from({ length: 10 }, (_, k) => ({ queue, type: 't', payload: k })));
    expect(r.every((x) => x.laneSeq === null)).toBe(true);
    const items = await claimHeads(queue);
    expect(items).toHaveLength(10);
    expect(items.every((i) => i.lane === null && i.laneSeq === null && i.isHead)).toBe(true);
    // One blocked, one retried later, one released later: the rest are unaffected.
    const [blocked, retried, released, ...rest] = items;
    await ledger.block(blocked!, { dependencyKey: 'lone-dep', maxWaitMs: 600_000 });
    await ledger.retry(retried!, { error: 'e', delayMs: 3_600_000 });
    await ledger.release(released!, { delayMs: 3_600_000 });
    for (const i of rest) expect((await ledger.complete(i)).won).toBe(true);
    const more = await ledger.enqueueMany(
      Array.from({ length: 3 }, (_, k) => ({ queue, type: 't', payload: 100 + k })),
    );
    const again = await claimHeads(queue);
    expect(again.map((i) => i.id).sort()).toEqual(more.map((x) => x.id).sort());
  });

  test('the same lane name in two queues is two lanes', async () => {
    const q1 = freshQueue('lane-q1');
    const q2 = freshQueue('lane-q2');
    const [a] = await ledger.enqueueMany([
      { queue: q1, type: 't', payload: 1, lane: 'shared' },
      { queue: q1, type: 't', payload: 2, lane: 'shared' },
    ]);
    const b = await ledger.enqueue({ queue: q2, type: 't', payload: 3, lane: 'shared' });
    expect(b.laneSeq).toBe(1);
    expect((await claimLaneHead(q1, 'shared')).id).toBe(a!.id);
    expect((await claimLaneHead(q2, 'shared')).id).toBe(b.id);
  });
});

test(
  'a laned batch, laneless items among it, is one round trip through ' +
    "the ledger's own pool: sequences, heads and lane rows as before",
  async () => {
    const queue = freshQueue('lane-one-trip');
    // Warm the pool, so no connection's session setup is counted.
    await ledger.enqueueMany([{ queue, type: 't', payload: { warm: true }, lane: 'warm' }]);
    const sent: string[] = [];
    const stop = onEveryStatement((text) => void sent.push(text));
    let results;
    try {
      results = await ledger.enqueueMany([
        { queue, type: 't', payload: { n: 1 }, lane: 'a' },
        { queue, type: 't', payload: { n: 2 }, lane: 'b' },
        { queue, type: 't', payload: { n: 3 } },
        { queue, type: 't', payload: { n: 4 }, lane: 'a' },
        { queue, type: 't', payload: { n: 5 }, lane: 'warm' },
      ]);
    } finally {
      stop();
    }
    expect(sent, sent.map((s) => s.slice(0, 50)).join('\n')).toHaveLength(1);
    expect(results.map((r) => r.laneSeq)).toEqual([1, 1, null, 2, 2]);
    const heads = await Promise.all(results.map(async (r) => (await mustGet(ledger, r.id)).isHead));
    expect(heads).toEqual([true, true, true, false, false]);
    expect(await laneRow(ledger, queue, 'a')).toEqual({ nextSeq: 2, busy: true });
    expect(await laneRow(ledger, queue, 'warm')).toEqual({ nextSeq: 2, busy: true });
  },
);

test('a batch over more lanes than one upsert takes is still one round trip, every lane in order', async () => {
  const queue = freshQueue('lane-chunks');
  const lanes = LANES_PER_UPSERT * 3 + 5;
  await ledger.enqueueMany([{ queue, type: 't', payload: {}, lane: 'warm' }]);
  const sent: string[] = [];
  const stop = onEveryStatement((text) => void sent.push(text));
  let results;
  try {
    results = await ledger.enqueueMany(
      Array.from({ length: lanes * 3 }, (_, k) => ({ queue, type: 't', payload: { k }, lane: `l${k % lanes}` })),
    );
  } finally {
    stop();
  }
  expect(sent).toHaveLength(1);
  expect(results.map((r) => r.laneSeq)).toEqual(Array.from({ length: lanes * 3 }, (_, k) => Math.floor(k / lanes) + 1));
  for (const lane of ['l0', `l${LANES_PER_UPSERT}`, `l${lanes - 1}`])
    expect(await laneRow(ledger, queue, lane)).toEqual({ nextSeq: 3, busy: true });
  const heads = await Promise.all(
    results
      .slice(0, 3)
      .concat(results.slice(lanes, lanes + 1))
      .map(async (r) => (await mustGet(ledger, r.id)).isHead),
  );
  expect(heads).toEqual([true, true, true, false]);
});
