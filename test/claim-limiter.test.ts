import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
const consumers: Consumer[] = [];
afterEach(async () => {
  for (const c of consumers.splice(0)) await c.stop({ drainTimeoutMs: 5_000 });
  await tw?.drop();
  await tl?.drop();
});

test('maxProcessing caps processing items: a consumer with 8 slots never holds more than 3 items at once', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('capped');
  let running = 0;
  let peak = 0;
  const handler = async (): Promise<void> => {
    running++;
    peak = Math.max(peak, running);
    await new Promise((r) => setTimeout(r, 30));
    running--;
  };
  for (let i = 0; i < 1; i++) {
    const c = new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 8, maxProcessing: 3, handlers: { t: handler } });
    consumers.push(c);
    await c.start();
  }
  await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueueMany(Array.from({ length: 40 }, (_, i) => ({ queue, type: 't', payload: { i } })));
  await waitFor(async () => ((await tl!.ledger.stats(queue))[0]?.counts.completed === 40 ? true : undefined), 30_000, 'all 40 done');
  expect(peak).toBeLessThanOrEqual(3);
  // The cap is what held them back, not a lack of work: it was reached.
  expect(peak).toBe(3);
});
