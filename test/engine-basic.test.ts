import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

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
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  const inputs = [];
  for (let n = 0; n < 100; n++) inputs.push({ queue, type: 'step', lane: `L${n % 4}`, payload: { n } });
  await producer.enqueueMany(inputs);
  await waitFor(async () => consumer.counters.completed === 100 || undefined, 20_000, 'all completed');
  await consumer.stop();
  for (const [lane, ns] of seen) expect(ns, lane).toEqual([...ns].sort((a, b) => a - b));
  expect(consumer.counters.wakeEntriesRead).toBeGreaterThan(0);
  const [stats] = await tl.ledger.stats(queue);
  expect(stats?.counts.completed).toBe(100);
});
