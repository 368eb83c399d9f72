import { once } from 'node:events';
import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import { BlockOnError } from '../src/consumer/errors.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { mustGet } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
let consumer: Consumer | undefined;
afterEach(async () => {
  await consumer?.stop({ drainTimeoutMs: 1000 });
  await tw?.drop();
  await tl?.drop();
});

test('a consumer that claims only some types leaves a woken item of another type alone', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('types');
  const ran: string[] = [];
  consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    types: ['a'],
    concurrency: 4,
    pollIntervalMs: 60_000,
    handlers: { a: async () => void ran.push('a'), b: async () => void ran.push('b') },
  });
  await consumer.start();
  // Another process's producer: each enqueue publishes a wake-up naming its item.
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  const b = await producer.enqueue({ queue, type: 'b', payload: 1 });
  const a = await producer.enqueue({ queue, type: 'a', payload: 2 });
  await waitFor(
    async () => (await mustGet(tl!.ledger, a.id)).state === 'completed' || undefined,
    10_000,
    'the item of type a',
  );
  // Both wake-ups were read; the one naming b claimed nothing.
  await waitFor(() => consumer!.counters.wakeEntriesRead >= 2 || undefined, 10_000, 'both wake-ups read');
  expect(await mustGet(tl.ledger, b.id)).toMatchObject({ state: 'pending', attempt: 0 });
  expect(ran).toEqual(['a']);
  expect(consumer.counters.claimed).toBe(1);
});

test('a handler that blocks on a key woken while it ran is run again at once, not parked', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('dep-race-engine');
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  let attempts = 0;
  consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 2,
    pollIntervalMs: 60_000, // no sweep: only the engine's own reaction can bring the item back
    handlers: {
      t: async () => {
        attempts++;
        if (attempts > 1) return 'done';
        // The handler read the awaited fact (absent); the fact commits and is woken before it blocks.
        await producer.wakeDependency('fact:1');
        throw new BlockOnError('fact:1', 600_000);
      },
    },
  });
  await consumer.start();
  const { id } = await producer.enqueue({ queue, type: 't', payload: 1 });
  await waitFor(
    async () => (await mustGet(tl!.ledger, id)).state === 'completed' || undefined,
    10_000,
    'the item to run again and complete',
  );
  expect(attempts).toBe(2);
  expect((await mustGet(tl.ledger, id)).attempt).toBe(1);
});

test('a BlockOn the ledger refuses (a malformed key) fails the attempt instead of stranding the lease', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('bad-block');
  let attempts = 0;
  consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 1,
    leaseMs: 60_000, // a stranded lease would outlast the test
    backoff: { baseMs: 10, factor: 2, maxMs: 10, jitter: 0 },
    handlers: {
      t: async () => {
        attempts++;
        if (attempts === 1) throw new BlockOnError('half an emoji \ud83d', 60_000);
        return 'ok';
      },
    },
  });
  await consumer.start();
  const { id } = await new Producer({ ledger: tl.ledger, wake: tw.remote() }).enqueue({
    queue,
    type: 't',
    payload: 1,
  });
  await waitFor(
    async () => (await mustGet(tl!.ledger, id)).state === 'completed' || undefined,
    10_000,
    'the retried attempt to complete',
  );
  const attemptsRecorded = (await tl.ledger.inspect(id))?.attempts ?? [];
  expect(attemptsRecorded.map((a) => a.outcome)).toEqual(['retried', 'completed']);
  expect(attemptsRecorded[0]?.error).toContain('dependencyKey');
});

test(
  'a wake-up naming more items than a claim round has room for: the ' +
    'rest are claimed by id in the next rounds, not left to a sweep',
  async () => {
    tl = await createTestLedger();
    tw = createTestWake();
    const queue = uniqueQueue('named-overflow');
    // The real ledger, recording the ids each claim by id is asked for.
    const named: string[] = [];
    class RecordingLedger extends Ledger {
      override claimByIds(input: Parameters<Ledger['claimByIds']>[0]): ReturnType<Ledger['claimByIds']> {
        named.push(...input.ids);
        return super.claimByIds(input);
      }
    }
    const ledger = new RecordingLedger({ url: tl.url, poolSize: 4 });
    const ran: number[] = [];
    // One slot, no prefetch: a claim round has room for one item. A lease under 24 s: no offers.
    consumer = new Consumer({
      ledger,
      wake: tw.wake,
      queue,
      concurrency: 1,
      prefetch: 0,
      leaseMs: 10_000,
      pollIntervalMs: 60_000,
      maintenance: false,
      handlers: { t: async (job: { payload: { k: number } }) => void ran.push(job.payload.k) },
    });
    const firstRound = once(consumer, 'claimRound');
    await consumer.start();
    // The start-up head search found nothing (on a loaded machine it could otherwise run after the
    // enqueue and find the items itself): from here only the wake-up says there is work.
    await firstRound;
    // One batch from another process: one wake-up naming all three.
    const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
    const ids = (await producer.enqueueMany([0, 1, 2].map((k) => ({ queue, type: 't', payload: { k } })))).map(
      (r) => r.id,
    );
    await waitFor(() => ran.length === 3 || undefined, 10_000, 'all three to run');
    // Each is asked for by id: the two the first round had no room for wait for the next rounds, not dropped
    // for a head search or a sweep to find (the poll is a minute away). The start-up sweep looks for work once
    // more after its housekeeping; on a slow server that look may come after the enqueue and take one by a head
    // search before its turn by id, so all three may have run before the last is asked for: wait for that too.
    await waitFor(
      () => ids.every((id) => named.includes(id)) || undefined,
      10_000,
      'each named item to be asked for by id',
    );
    await consumer.stop({ drainTimeoutMs: 1000 });
    consumer = undefined;
    await ledger.close();
    expect(ids.filter((id) => !named.includes(id))).toEqual([]);
  },
);
