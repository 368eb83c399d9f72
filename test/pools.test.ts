import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { planPools, poolConsumers } from '../src/consumer/pools.js';
import { ValidationError } from '../src/errors.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// Executor pools: a queue's slots split by class, so a bulk flood leaves room for interactive items (docs/design.md §6).

describe('planPools', () => {
  test("'auto' gives a quarter to latency, a quarter to bulk and the rest to a shared pool preferring the latency classes", () => {
    expect(planPools(16, 'auto')).toEqual([
      { profile: 'latency', classes: ['interactive', 'default'], concurrency: 4 },
      { profile: 'bulk', classes: ['bulk'], concurrency: 4 },
      { profile: 'shared', classes: ['interactive', 'default', 'bulk'], concurrency: 8, preferClasses: ['interactive', 'default', 'bulk'] },
    ]);
    expect(planPools(2, 'auto').map((p) => [p.profile, p.concurrency])).toEqual([
      ['latency', 1],
      ['bulk', 1],
    ]);
  });

  test("pools keep to the queue's classes; one left with none, or 'auto' on one slot, is refused with its field named", () => {
    expect(planPools(4, [{ profile: 'shared', concurrency: 4, prefer: 'default-heavy' }], ['default', 'bulk'])).toEqual([
      { profile: 'shared', classes: ['default', 'bulk'], concurrency: 4, preferClasses: ['default', 'bulk'] },
    ]);
    const refused = (fn: () => unknown): string[] => {
      try {
        fn();
      } catch (error) {
        if (error instanceof ValidationError) return error.fields;
        throw error;
      }
      throw new Error('not refused');
    };
    expect(refused(() => planPools(4, [{ profile: 'latency', concurrency: 4 }], ['bulk'], 'queues.0.pools'))).toEqual(['queues.0.pools.0.profile']);
    expect(refused(() => planPools(1, 'auto'))).toEqual(['pools']);
  });
});

describe('pools under a bulk flood', () => {
  let tl: TestLedger;
  let tw: TestWake;
  const consumers: Consumer[] = [];
  beforeAll(async () => {
    tl = await createTestLedger();
    tw = createTestWake();
  });
  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.stop({ drainTimeoutMs: 5_000 })));
  });
  afterAll(async () => {
    await tw?.drop();
    await tl?.drop();
  });

  /**
   * 300 bulk items of 40 ms each are enqueued, then 10 interactive items one every 20 ms. Returns how many
   * bulk items had not started yet when the last interactive item completed.
   */
  async function floodThenInteractive(make: (queue: string, handlers: Record<string, () => Promise<void>>) => Consumer[]): Promise<number> {
    const queue = uniqueQueue('pools');
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    let bulkStarted = 0;
    let interactiveDone = 0;
    let bulkStartedWhenInteractiveDone = -1;
    const handlers = {
      bulk: async () => {
        bulkStarted++;
        await new Promise((r) => setTimeout(r, 40));
      },
      interactive: async () => {
        if (++interactiveDone === 10) bulkStartedWhenInteractiveDone = bulkStarted;
      },
    };
    const made = make(queue, handlers);
    consumers.push(...made);
    for (const c of made) await c.start();
    await producer.enqueueMany(Array.from({ length: 300 }, (_, i) => ({ queue, type: 'bulk', queueClass: 'bulk' as const, payload: { i } })));
    await waitFor(() => bulkStarted > 0 || undefined, 10_000, 'the flood to start');
    for (let i = 0; i < 10; i++) {
      await producer.enqueue({ queue, type: 'interactive', queueClass: 'interactive', payload: { i } });
      const at = Date.now();
      await waitFor(() => Date.now() - at >= 20 || undefined, 1_000, 'the next arrival');
    }
    await waitFor(() => interactiveDone === 10 || undefined, 30_000, 'the interactive items');
    return 300 - bulkStartedWhenInteractiveDone;
  }

  test('interactive items start while the bulk flood still waits, with pools', async () => {
    const notStarted = await floodThenInteractive((queue, handlers) => poolConsumers({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 8, pools: 'auto', handlers }));
    expect(notStarted).toBeGreaterThan(150);
  });

  test('a preferred-class tier takes a later interactive item before older bulk ones; without it, due order', async () => {
    const order = async (preferClasses?: ('interactive' | 'default' | 'bulk')[]): Promise<string[]> => {
      const queue = uniqueQueue('prefer');
      await tl.ledger.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue, type: 't', queueClass: 'bulk' as const, payload: { c: `bulk${i}` } })));
      await tl.ledger.enqueue({ queue, type: 't', queueClass: 'interactive', payload: { c: 'interactive' } });
      const started: string[] = [];
      const c = new Consumer<Record<string, never>>({
        ledger: tl.ledger,
        queue,
        concurrency: 1,
        prefetch: 0,
        ...(preferClasses ? { preferClasses } : {}),
        handlers: { t: async (job) => void started.push((job.payload as { c: string }).c) },
      });
      consumers.push(c);
      await c.start();
      await waitFor(() => started.length === 6 || undefined, 10_000, 'all six');
      return started;
    };
    expect((await order(['interactive', 'default', 'bulk']))[0]).toBe('interactive');
    expect((await order())[0]).toMatch(/^bulk/);
  });
});
