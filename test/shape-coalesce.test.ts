import { describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { defineHandler, type HandlerEntry } from '../src/consumer/types.js';
import { ValidationError } from '../src/errors.js';
import type { Producer } from '../src/producer/producer.js';
import { consumerHarness } from './support/consumer-harness.js';
import { itemCount } from './support/items.js';
import { waitFor, type TestLedger } from './support/ledger.js';

// Coalescing through a consumer (docs/design/batches-and-steps.md, Coalescing).

const harness = consumerHarness('coalesce');

async function setUp(
  handlers: Record<string, HandlerEntry>,
): Promise<{ tl: TestLedger; consumer: Consumer; queue: string; producer: Producer }> {
  const { tl, queue, producer } = await harness.setUp();
  return { tl, consumer: await harness.consumer(handlers, { concurrency: 4 }), queue, producer };
}

interface Run {
  n: number;
  count: number;
  attempt: number;
}

describe('coalescing', () => {
  test(
    '50 updates to one entity while its handler is slow: at most 3 runs, ' +
      'the last sees the newest, none left pending, one attempt each',
    async () => {
      const runs: Run[] = [];
      let release: () => void = () => undefined;
      const firstRunHeld = new Promise<void>((resolve) => (release = resolve));
      const { tl, consumer, queue, producer } = await setUp({
        upd: defineHandler<{ n: number }>({
          coalesce: 'latest',
          handle: async (job) => {
            runs.push({ n: job.payload.n, count: job.coalesced?.count ?? 1, attempt: job.attempt });
            if (runs.length === 1) await firstRunHeld;
            await new Promise((r) => setTimeout(r, 100));
          },
        }),
      });
      await producer.enqueue({ queue, type: 'upd', lane: 'entity:7', payload: { n: 0 } });
      await waitFor(() => runs.length === 1 || undefined, 10_000, 'the first run');
      for (let n = 1; n < 50; n++) await producer.enqueue({ queue, type: 'upd', lane: 'entity:7', payload: { n } });
      release();
      await waitFor(
        async () => ((await itemCount(tl.ledger, queue, 'completed')) === 50 ? true : undefined),
        20_000,
        'all 50 completed',
      );
      expect(runs.length).toBeLessThanOrEqual(3);
      expect(runs[runs.length - 1]?.n).toBe(49);
      expect(runs.reduce((sum, r) => sum + r.count, 0)).toBe(50);
      expect(runs.every((r) => r.attempt === 1)).toBe(true);
      expect(await itemCount(tl.ledger, queue, 'pending')).toBe(0);
      expect(consumer.counters.coalesced).toBe(50 - runs.length);
      const ended = await tl.ledger.listDead({ queue });
      expect(ended).toEqual([]);
    },
  );

  test('a lane of mixed types keeps its order: a group never crosses an item of another type', async () => {
    const order: number[] = [];
    const { tl, queue, producer } = await setUp({
      upd: defineHandler<{ n: number }>({
        coalesce: 'all',
        handle: async (job) => {
          for (const p of job.coalesced?.payloads ?? [job.payload]) order.push(p.n);
        },
      }),
      other: async (job: { payload: { n: number } }) => void order.push(job.payload.n),
    });
    const types = ['upd', 'upd', 'other', 'upd', 'upd', 'upd', 'other', 'upd'];
    await producer.enqueueMany(types.map((type, n) => ({ queue, type, lane: 'L', payload: { n } })));
    await waitFor(
      async () => ((await itemCount(tl.ledger, queue, 'completed')) === types.length ? true : undefined),
      20_000,
      'all completed',
    );
    expect(order).toEqual(types.map((_, n) => n));
  });

  test(
    'items of a coalescing type are never claimed outside claim rounds (at ' +
      'insert, under an offer, as a successor); other types still are',
    async () => {
      const { tl, consumer, queue, producer } = await setUp({
        upd: defineHandler<{ n: number }>({ coalesce: 'latest', handle: async () => undefined }),
        plain: async () => undefined,
      });
      const outside = (): number =>
        consumer.counters.claimedAtInsert + consumer.counters.handedOver + consumer.counters.claimedWithCompletion;
      // A producer sharing the consumer's wake channel inserts items claimed for it when it has room.
      for (let n = 0; n < 5; n++) {
        await producer.enqueue({ queue, type: 'plain', lane: `p${n}`, payload: { n } });
        await waitFor(() => consumer.counters.completed === n + 1 || undefined, 10_000, `plain ${n}`);
      }
      const plainOutside = outside();
      expect(plainOutside).toBeGreaterThan(0);
      for (let n = 0; n < 5; n++) {
        await producer.enqueue({ queue, type: 'upd', lane: `u${n}`, payload: { n } });
        await waitFor(() => consumer.counters.completed === 6 + n || undefined, 10_000, `upd ${n}`);
      }
      expect(outside()).toBe(plainOutside);
      expect(await itemCount(tl.ledger, queue, 'completed')).toBe(10);
    },
  );

  test('a bad coalesce option is a ValidationError naming it', async () => {
    const { tl } = await harness.setUp();
    const make = (def: Record<string, unknown>) => () =>
      new Consumer({
        ledger: tl.ledger,
        queue: 'q',
        handlers: { t: { handle: async () => undefined, ...def } as HandlerEntry },
      });
    for (const [def, field] of [
      [{ coalesce: 'newest' }, 'handlers.t.coalesce'],
      [{ coalesce: 'latest', coalesceMax: 0 }, 'handlers.t.coalesceMax'],
      [{ coalesceMax: 5 }, 'handlers.t.coalesceMax'],
    ] as const) {
      let caught: unknown;
      try {
        make(def)();
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(ValidationError);
      expect((caught as ValidationError).fields).toEqual([field]);
    }
  });
});
