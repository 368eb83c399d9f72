import { once } from 'node:events';
import { afterEach, expect, test } from 'vitest';
import { MAX_ENTRIES_PER_MESSAGE, MAX_IDS_PER_ENTRY } from '../src/wake/streams.js';
import { wakeStreamKey } from '../src/wake/keys.js';
import { Consumer } from '../src/consumer/consumer.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { exactCounts } from './support/counts.js';

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
afterEach(async () => {
  await tw?.drop();
  await tl?.drop();
});

test('a consumer completes every item in lane order, woken by Redis', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue();
  const seen = new Map<string, number[]>();
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 8,
    pollIntervalMs: 60_000,
    handlers: {
      step: async (job: { lane: string | null; payload: { n: number } }) => {
        const list = seen.get(job.lane ?? '-') ?? [];
        list.push(job.payload.n);
        seen.set(job.lane ?? '-', list);
      },
    },
  });
  await consumer.start();
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  const inputs = [];
  for (let n = 0; n < 100; n++) inputs.push({ queue, type: 'step', lane: `L${n % 4}`, payload: { n } });
  await producer.enqueueMany(inputs);
  await waitFor(async () => consumer.counters.completed === 100 || undefined, 20_000, 'all completed');
  await consumer.stop();
  // Each lane ran each of its items exactly once, in enqueue order: a duplicate start or a skipped
  // item would show here (a sorted copy would not catch the same n twice).
  const expected = new Map<string, number[]>();
  for (const input of inputs) expected.set(input.lane, [...(expected.get(input.lane) ?? []), input.payload.n]);
  expect(new Set(seen.keys())).toEqual(new Set(expected.keys()));
  for (const [lane, ns] of expected) expect(seen.get(lane), lane).toEqual(ns);
  expect(consumer.counters.wakeEntriesRead).toBeGreaterThan(0);
  // No claim, sweep or hand-back failed on the way: with generous waits, a path that kept failing would pass as slow.
  expect(consumer.counters.errors).toBe(0);
  const [stats] = await tl.ledger.stats(queue);
  expect(stats?.counts.completed.count).toBe(100);
});

test('a consumer that finishes a lane head takes its successor in the same transaction (lane affinity)', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('affinity');
  const order: number[] = [];
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 1,
    pollIntervalMs: 60_000, // no sweep: only the wake-up and the completions bring work in
    handlers: { step: async (job: { payload: { n: number } }) => void order.push(job.payload.n) },
  });
  await consumer.start();
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  await producer.enqueueMany(
    Array.from({ length: 20 }, (_, n) => ({ queue, type: 'step', lane: 'only', payload: { n } })),
  );
  await waitFor(() => consumer.counters.completed === 20 || undefined, 20_000, 'the lane completed');
  await consumer.stop();
  expect(order).toEqual(Array.from({ length: 20 }, (_, n) => n));
  // The wake-up's claim takes the head; nearly every later item comes with its predecessor's completion.
  expect(consumer.counters.claimedWithCompletion).toBeGreaterThanOrEqual(15);
  expect(consumer.counters.claimed).toBe(20);
  const [stats] = await tl.ledger.stats(queue);
  expect(exactCounts(stats)).toMatchObject({ completed: 20, processing: 0, pending: 0 });
});

test(
  "a producer sharing the consumer's wake channel inserts work already " +
    'claimed for it, hands it wake-ups, and uses the stream once it is full',
  async () => {
    tl = await createTestLedger();
    tw = createTestWake();
    const queue = uniqueQueue('local');
    let releaseHold: (() => void) | undefined;
    const held = new Promise<void>((resolve) => (releaseHold = resolve));
    const consumer = new Consumer({
      ledger: tl.ledger,
      wake: tw.wake,
      queue,
      concurrency: 1,
      prefetch: 0,
      pollIntervalMs: 60_000, // only wake-ups bring work in
      handlers: { step: async () => undefined, hold: async () => held },
    });
    await consumer.start();
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    // The producer's wake-ups in the stream (a consumer may also pass on a wake-up of its own, kind 'advance').
    const enqueueEntries = async () => {
      const entries = await tw!.wake.redis.xrange(wakeStreamKey(tw!.keyPrefix, queue, 'default'), '-', '+');
      return entries.filter(([, fields]) => fields[0] === 'k' && fields[1] === 'enqueue').length;
    };

    // Due now, no lane, a free slot: inserted already claimed, no wake-up at all.
    const first = await producer.enqueue({ queue, type: 'step', payload: { n: 1 } });
    await waitFor(() => consumer.counters.completed === 1 || undefined, 10_000, 'the first item completed');
    expect(consumer.counters.claimedAtInsert).toBe(1);
    expect(tw.wake.counters).toEqual({ published: 0, deliveredLocally: 0, failed: 0 });
    expect(await tl.ledger.get(first.id)).toMatchObject({ state: 'completed', attempt: 1, leaseOwner: consumer.name });

    // A bad batch writes nothing and leaves no slot held: the next item is still claimed at insert.
    await expect(
      producer.enqueueMany([
        { queue, type: 'step', payload: {} },
        { queue, type: 'BAD TYPE', payload: {} },
      ]),
    ).rejects.toThrow(/type/);
    await producer.enqueue({ queue, type: 'step', payload: { n: 2 } });
    await waitFor(() => consumer.counters.completed === 2 || undefined, 10_000, 'the second item completed');
    expect(consumer.counters.claimedAtInsert).toBe(2);

    // A laned item whose lane is idle is its head: claimed at insert too.
    const laned = await producer.enqueue({ queue, type: 'step', lane: 'L', payload: { n: 3 } });
    await waitFor(() => consumer.counters.completed === 3 || undefined, 10_000, 'the laned item completed');
    expect(consumer.counters.claimedAtInsert).toBe(3);
    expect(await tl.ledger.get(laned.id)).toMatchObject({
      state: 'completed',
      attempt: 1,
      leaseOwner: consumer.name,
      lane: 'L',
      laneSeq: 1,
    });

    // An idempotency key must be resolved first: not claimed at insert; its wake-up is handed over in process.
    await producer.enqueue({ queue, type: 'step', idempotencyKey: 'k', payload: { n: 4 } });
    await waitFor(() => consumer.counters.completed === 4 || undefined, 10_000, 'the keyed item completed');
    expect(consumer.counters.claimedAtInsert).toBe(3);
    expect(tw.wake.counters.deliveredLocally).toBe(1);
    expect(consumer.counters.localWakes).toBe(1);
    expect(await enqueueEntries()).toBe(0);

    // Its one slot taken, the consumer takes nothing more: the next wake-up goes to the stream for other replicas.
    await producer.enqueue({ queue, type: 'hold', payload: {} });
    await waitFor(() => consumer.inFlight === 1 || undefined, 10_000, 'the hold item started');
    await producer.enqueue({ queue, type: 'step', payload: { n: 5 } });
    expect(consumer.counters.claimedAtInsert).toBe(4);
    expect(tw.wake.counters.deliveredLocally).toBe(1);
    expect(await enqueueEntries()).toBe(1);
    releaseHold?.();
    await waitFor(() => consumer.counters.completed === 6 || undefined, 10_000, 'all six completed');

    // A stopped consumer is no longer a local target.
    await consumer.stop();
    await producer.enqueue({ queue, type: 'step', payload: { n: 6 } });
    expect(consumer.counters.claimedAtInsert).toBe(4);
    expect(await enqueueEntries()).toBe(2);
    expect(tw.wake.counters.failed).toBe(0);
    const [stats] = await tl.ledger.stats(queue);
    expect(exactCounts(stats)).toMatchObject({ completed: 6, pending: 1, processing: 0 });
  },
);

test('a wake-up naming only part of a large batch still gets the whole batch claimed', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('big');
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 100,
    prefetch: 0,
    pollIntervalMs: 60_000, // only wake-ups bring work in
    handlers: { step: async () => undefined },
  });
  const firstRound = once(consumer, 'claimRound');
  await consumer.start();
  await firstRound; // the start-up claim found nothing: from here only the wake-up says there is work
  // A batch's wake-up is at most MAX_ENTRIES_PER_MESSAGE entries of MAX_IDS_PER_ENTRY ids: these
  // items are named only in part.
  const total = (MAX_ENTRIES_PER_MESSAGE + 2) * MAX_IDS_PER_ENTRY;
  await new Producer({ ledger: tl.ledger, wake: tw.remote() }).enqueueMany(
    Array.from({ length: total }, (_, n) => ({ queue, type: 'step', payload: { n } })),
  );
  await waitFor(() => consumer.counters.completed === total || undefined, 20_000, 'the whole batch completed');
  expect(consumer.counters.sweeps).toBe(1);
  await consumer.stop();
});

test('a lane that advances while a claim round is in flight is claimed at once, not at the next sweep', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const ledger = tl.ledger;
  const queue = uniqueQueue('advance');
  // Hold the claim round for item B until the lane's first item has finished.
  let openGate: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (openGate = resolve));
  let gateOn = false;
  let heldAtGate = false;
  // The consumer gets a ledger whose claims by id wait at the gate: the real one, seen through a wrapper.
  const gated: Ledger = Object.create(ledger) as Ledger;
  gated.claimByIds = async (spec) => {
    if (gateOn) {
      heldAtGate = true;
      await gate;
    }
    return ledger.claimByIds(spec);
  };
  let finishFirst: () => void = () => undefined;
  const firstHeld = new Promise<void>((resolve) => (finishFirst = resolve));
  const done: string[] = [];
  const consumer = new Consumer({
    ledger: gated,
    wake: tw.wake,
    queue,
    concurrency: 4,
    prefetch: 0,
    pollIntervalMs: 60_000, // a sweep would come far too late for the waits below
    handlers: {
      step: async (job: { payload: { name: string } }) => {
        if (job.payload.name === 'L1') await firstHeld;
        done.push(job.payload.name);
      },
    },
  });
  const firstRound = once(consumer, 'claimRound');
  await consumer.start();
  await firstRound;
  const producer = new Producer({ ledger, wake: tw.remote() });
  await producer.enqueueMany([
    { queue, type: 'step', lane: 'L', payload: { name: 'L1' } },
    { queue, type: 'step', lane: 'L', payload: { name: 'L2' } },
  ]);
  await waitFor(() => consumer.inFlight === 1 || undefined, 10_000, 'L1 running');
  const l1Finished = new Promise<void>((resolve) =>
    consumer.on('outcome', (item) => item.lane === 'L' && item.laneSeq === 1 && resolve()),
  );
  gateOn = true;
  await producer.enqueue({ queue, type: 'step', payload: { name: 'B' } });
  // B's claim round is now held at the gate; L1 finishes meanwhile, making L2 its lane's head.
  await waitFor(() => heldAtGate || undefined, 10_000, 'B claim round held');
  finishFirst();
  await l1Finished;
  openGate();
  await waitFor(
    () => (done.includes('L2') && done.includes('B')) || undefined,
    5_000,
    'L2 and B done well before a sweep',
  );
  expect(done.indexOf('L1')).toBeLessThan(done.indexOf('L2'));
  expect(consumer.counters.sweeps).toBe(1);
  await consumer.stop();
});

test("the consumer's wakeRead event names the items a wake-up from another process's producer brought", async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('wake-read');
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 4,
    pollIntervalMs: 60_000,
    handlers: { t: async () => {} },
  });
  const read: string[] = [];
  consumer.on('wakeRead', (r) => read.push(...r.ids));
  await consumer.start();
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  const results = await producer.enqueueMany([0, 1, 2].map((n) => ({ queue, type: 't', payload: { n } })));
  await waitFor(async () => consumer.counters.completed === 3 || undefined, 20_000, 'all completed');
  await consumer.stop();
  expect(read.sort()).toEqual(results.map((r) => r.id).sort());
});
