import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { planPools, poolConsumers } from '../src/consumer/pools.js';
import { ValidationError } from '../src/errors.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// Executor pools: a queue's slots split by class, so a bulk flood leaves room for interactive
// items (docs/design/consumer.md).

describe('planPools', () => {
  test(
    "'auto' gives a quarter to latency, a quarter to bulk and the " +
      'rest to a shared pool preferring the latency classes',
    () => {
      expect(planPools(16, 'auto')).toEqual([
        { profile: 'latency', classes: ['interactive', 'default'], concurrency: 4, prefetch: 0 },
        { profile: 'bulk', classes: ['bulk'], concurrency: 4, prefetch: 0 },
        {
          profile: 'shared',
          classes: ['interactive', 'default', 'bulk'],
          concurrency: 8,
          preferClasses: ['interactive', 'default', 'bulk'],
          prefetch: 0,
        },
      ]);
      // Pools that share no class keep their prefetch: none of them can start the other's items.
      expect(
        planPools(8, [
          { profile: 'latency', concurrency: 4 },
          { profile: 'bulk', concurrency: 4 },
        ]).map((p) => p.prefetch),
      ).toEqual([undefined, undefined]);
      expect(planPools(2, 'auto').map((p) => [p.profile, p.concurrency])).toEqual([
        ['latency', 1],
        ['bulk', 1],
      ]);
    },
  );

  test(
    "pools keep to the queue's classes; one left with none, or " +
      "'auto' on one slot, is refused with its field named",
    () => {
      expect(
        planPools(4, [{ profile: 'shared', concurrency: 4, prefer: 'default-heavy' }], ['default', 'bulk']),
      ).toEqual([
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
      expect(refused(() => planPools(4, [{ profile: 'latency', concurrency: 4 }], ['bulk'], 'queues.0.pools'))).toEqual(
        ['queues.0.pools.0.profile'],
      );
      expect(refused(() => planPools(1, 'auto'))).toEqual(['pools']);
    },
  );
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
   * 300 bulk items whose handlers hold their slots until the test lets them go, then 10 interactive
   * items: how many interactive items complete while every bulk handler that started still holds its
   * slot. With pools the latency pool's slots are free for them; without, no slot is.
   */
  async function interactiveBesideHeldFlood(
    make: (queue: string, handlers: Record<string, () => Promise<void>>) => Consumer[],
  ): Promise<{ done: number; bulkStarted: number }> {
    const queue = uniqueQueue('pools');
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    let bulkStarted = 0;
    let interactiveDone = 0;
    let letGo: () => void = () => undefined;
    const held = new Promise<void>((r) => (letGo = r));
    const handlers = {
      bulk: async () => {
        bulkStarted++;
        await held;
      },
      interactive: async () => void interactiveDone++,
    };
    const made = make(queue, handlers);
    consumers.push(...made);
    for (const c of made) await c.start();
    try {
      await producer.enqueueMany(
        Array.from({ length: 300 }, (_, i) => ({ queue, type: 'bulk', queueClass: 'bulk' as const, payload: { i } })),
      );
      await waitFor(() => bulkStarted > 0 || undefined, 10_000, 'the flood to start');
      await producer.enqueueMany(
        Array.from({ length: 10 }, (_, i) => ({
          queue,
          type: 'interactive',
          queueClass: 'interactive' as const,
          payload: { i },
        })),
      );
      await waitFor(
        () => interactiveDone === 10 || undefined,
        15_000,
        'the interactive items, beside the held flood',
      ).catch(() => undefined);
      return { done: interactiveDone, bulkStarted };
    } finally {
      letGo();
    }
  }

  test('interactive items run beside a bulk flood that holds every other slot, with pools', async () => {
    const pooled = await interactiveBesideHeldFlood((queue, handlers) =>
      poolConsumers({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 8, pools: 'auto', handlers }),
    );
    // The bulk and shared pools (2 + 4 slots) hold bulk items; the latency pool's 2 ran all ten.
    expect(pooled.done).toBe(10);
    expect(pooled.bulkStarted).toBeLessThanOrEqual(6);
  });

  test('a preferred-class tier takes a later interactive item before older bulk ones; else due order', async () => {
    const order = async (preferClasses?: ('interactive' | 'default' | 'bulk')[]): Promise<string[]> => {
      const queue = uniqueQueue('prefer');
      await tl.ledger.enqueueMany(
        Array.from({ length: 5 }, (_, i) => ({
          queue,
          type: 't',
          queueClass: 'bulk' as const,
          payload: { c: `bulk${i}` },
        })),
      );
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
