import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Producer } from '../src/producer/producer.js';
import { LanewakeMetrics } from '../src/supervisor/metrics.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { freshQueue } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// Pausing a queue: a flag the ledger holds, which every claim path checks (docs/design.md §7, Pausing a queue).

let tl: TestLedger;
let tw: TestWake | undefined;
const consumers: Consumer[] = [];
beforeAll(async () => {
  tl = await createTestLedger();
});
afterEach(async () => {
  for (const c of consumers.splice(0)) await c.stop({ drainTimeoutMs: 5_000 });
  await tw?.drop();
  tw = undefined;
});
afterAll(async () => {
  await tl?.drop();
});

describe('a paused queue at the ledger', () => {
  test('claims nothing by any path, still takes enqueues, and says why; resumed, it claims again', async () => {
    const queue = freshQueue('paused');
    const other = freshQueue('notpaused');
    await tl.ledger.pause(queue);
    expect(await tl.ledger.pausedQueues([queue, other])).toEqual(new Set([queue]));
    const made = await tl.ledger.enqueueMany(Array.from({ length: 4 }, (_, i) => ({ queue, type: 't', payload: { i } })));
    await tl.ledger.enqueue({ queue: other, type: 't', payload: {} });
    expect((await tl.ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items).toEqual([]);
    expect(await tl.ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids: made.map((m) => m.id) })).toEqual([]);
    expect((await tl.ledger.claim({ queue: other, owner: 'w', limit: 10, leaseMs: 60_000 })).items).toHaveLength(1);
    expect(await tl.ledger.explain(made[0]!.id)).toMatchObject({ code: 'queue_paused', details: { queue } });
    expect((await tl.ledger.sweepSignals([queue, other])).map((s) => [s.queue, s.paused])).toEqual([
      [queue, true],
      [other, false],
    ]);
    await tl.ledger.resume(queue);
    expect((await tl.ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items).toHaveLength(4);
  });

  test("a lane's successor is not claimed with its head's completion while paused, and is the head when resumed", async () => {
    const queue = freshQueue('pausedlane');
    const [head, next] = await tl.ledger.enqueueMany([0, 1].map((i) => ({ queue, type: 't', lane: 'L', payload: { i } })));
    const [held] = (await tl.ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 60_000 })).items;
    expect(held?.id).toBe(head!.id);
    await tl.ledger.pause(queue);
    const done = await tl.ledger.completeManyClaimingNext([{ handle: held! }], { owner: 'w', token: 'tok-next-successor', leaseMs: 60_000, max: 5 });
    expect(done.results[0]?.won).toBe(true);
    expect(done.claimed).toEqual([]);
    expect(await tl.ledger.get(next!.id)).toMatchObject({ state: 'pending', isHead: true });
    await tl.ledger.resume(queue);
    expect((await tl.ledger.claim({ queue, owner: 'w', limit: 5, leaseMs: 60_000 })).items.map((c) => c.id)).toEqual([next!.id]);
  });

  test('bad input names its field', async () => {
    await expect(tl.ledger.pause('Not A Queue')).rejects.toMatchObject({ name: 'ValidationError', issues: [expect.objectContaining({ field: 'queue' })] });
  });
});

describe('a paused queue with consumers', () => {
  test('with Redis: consumers hear the pause at once and start nothing (no claim round, no claim at insert); resumed, everything runs', async () => {
    tw = createTestWake();
    const queue = uniqueQueue('pausewake');
    const started: string[] = [];
    const c = new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 4, pollIntervalMs: 100, handlers: { t: async (job) => void started.push(job.id) } });
    consumers.push(c);
    await c.start();
    const metrics = new LanewakeMetrics({ defaultMetrics: false });
    const unobserve = metrics.observeConsumer(c);
    const pausedSeries = async (): Promise<string | undefined> => (await metrics.metrics()).split('\n').find((l) => l.startsWith(`lanewake_queue_paused{queue="${queue}"}`));
    expect(await pausedSeries()).toMatch(/ 0$/);
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    const heard = new Promise<void>((resolve) => c.on('control', (m: { type: string }) => m.type === 'pause' && resolve()));
    await producer.pause(queue);
    await heard;
    const made = await producer.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ queue, type: 't', payload: { i } })));
    await producer.enqueue({ queue, type: 't', payload: { single: true } });
    // Two sweeps have come and gone since: each would have claimed what it found.
    const sweeps = c.counters.sweeps;
    await waitFor(() => c.counters.sweeps >= sweeps + 2 || undefined, 10_000, 'two sweeps');
    expect(started).toEqual([]);
    expect(c.counters.claimedAtInsert).toBe(0);
    expect(await pausedSeries()).toMatch(/ 1$/);
    await producer.resume(queue);
    await waitFor(() => started.length === 11 || undefined, 10_000, 'all eleven, resumed');
    expect(new Set(started)).toEqual(new Set([...made.map((m) => m.id), started.find((id) => !made.some((m) => m.id === id))]));
    expect(await pausedSeries()).toMatch(/ 0$/);
    unobserve();
  });

  test('without Redis: a consumer learns the pause from the ledger at its next sweep, and a restarted one starts paused', async () => {
    const queue = uniqueQueue('pausedb');
    const started: string[] = [];
    const make = (): Consumer => {
      const c = new Consumer({ ledger: tl.ledger, queue, concurrency: 2, pollIntervalMs: 100, handlers: { t: async (job) => void started.push(job.id) } });
      consumers.push(c);
      return c;
    };
    const first = make();
    await first.start();
    await tl.ledger.pause(queue);
    const sweeps = first.counters.sweeps;
    await waitFor(() => first.counters.sweeps >= sweeps + 1 || undefined, 10_000, 'a sweep');
    await tl.ledger.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue, type: 't', payload: { i } })));
    await first.stop();
    const second = make();
    await second.start();
    const later = second.counters.sweeps;
    await waitFor(() => second.counters.sweeps >= later + 2 || undefined, 10_000, 'two sweeps of the restarted consumer');
    expect(started).toEqual([]);
    await tl.ledger.resume(queue);
    await waitFor(() => started.length === 5 || undefined, 10_000, 'all five, resumed');
  });
});
