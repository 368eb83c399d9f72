import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { defineBatchHandler } from '../src/consumer/batches.js';
import type { Consumer } from '../src/consumer/consumer.js';
import type { BatchOutcomes, HandlerEntry, Job } from '../src/consumer/types.js';
import { ValidationError } from '../src/errors.js';
import type { Producer } from '../src/producer/producer.js';
import { consumerHarness } from './support/consumer-harness.js';
import { history, itemCount, mustGet } from './support/items.js';
import { waitFor, type TestLedger } from './support/ledger.js';

// Batch handlers through a consumer (docs/design/batches-and-steps.md, Batch handlers).

const harness = consumerHarness('batch');

async function setUp(
  handlers: Record<string, HandlerEntry>,
  concurrency = 8,
): Promise<{ tl: TestLedger; consumer: Consumer; queue: string; producer: Producer }> {
  const { tl, queue, producer } = await harness.setUp();
  await sql`CREATE TABLE batch_writes (item_id VARCHAR(32) NOT NULL PRIMARY KEY)`.execute(tl.ledger.db);
  return {
    tl,
    consumer: await harness.consumer(handlers, { concurrency, backoff: { baseMs: 50, factor: 1 } }),
    queue,
    producer,
  };
}

type N = { n: number };

/** Takes a held item's lease away, as a reclaim and another holder's claim would. */
async function stealLease(t: TestLedger, id: string): Promise<void> {
  await sql`UPDATE ${t.ledger.tables.items} SET lease_token = 'stolen-by-another-holder' WHERE id = ${id}`.execute(
    t.ledger.db,
  );
}

describe('batch handlers', () => {
  test('the outcome map is honoured item by item; an item missing from it is retried', async () => {
    const calls: number[][] = [];
    const { tl, queue, producer } = await setUp({
      b: defineBatchHandler<N>({
        batch: { max: 6, maxWaitMs: 300 },
        handle: async (jobs) => {
          calls.push(jobs.map((j) => j.payload.n));
          const out: Record<string, BatchOutcomes[string]> = {};
          for (const j of jobs) {
            if (j.attempt > 1 || calls.length > 1)
              out[j.id] = { outcome: 'complete', result: { n: j.payload.n, attempt: j.attempt } };
            else if (j.payload.n <= 1) out[j.id] = { outcome: 'complete', result: { n: j.payload.n } };
            else if (j.payload.n === 2) out[j.id] = { outcome: 'retry', error: new Error('try again') };
            else if (j.payload.n === 3)
              out[j.id] = { outcome: 'dead', error: new Error('never'), failureClass: 'bad_input' };
            else if (j.payload.n === 4) out[j.id] = { outcome: 'release', delayMs: 0 };
            // n = 5: left out.
          }
          return out;
        },
      }),
    });
    const ids = (await producer.enqueueMany([0, 1, 2, 3, 4, 5].map((n) => ({ queue, type: 'b', payload: { n } })))).map(
      (r) => r.id,
    );
    // Counts of end states only: an item never leaves one, so two reads cannot miss an item moving between them
    // (pending then processing, read apart, could both read 0 while a batch hands items back).
    await waitFor(
      async () =>
        (await itemCount(tl.ledger, queue, 'completed')) + (await itemCount(tl.ledger, queue, 'dead')) === 6
          ? true
          : undefined,
      20_000,
      'all ended',
    );
    expect(calls[0]).toEqual([0, 1, 2, 3, 4, 5]);
    const items = await Promise.all(ids.map((id) => mustGet(tl.ledger, id)));
    expect(items.map((i) => [i.state, i.attempt])).toEqual([
      ['completed', 1],
      ['completed', 1],
      ['completed', 2],
      ['dead', 1],
      ['completed', 1],
      ['completed', 2],
    ]);
    expect(items[0]?.result).toEqual({ n: 0 });
    expect(items[3]).toMatchObject({ failureClass: 'bad_input' });
    expect((await history(tl.ledger, ids[2]!)).map((h) => h.outcome)).toEqual(['retried', 'completed']);
    expect((await history(tl.ledger, ids[4]!)).map((h) => h.outcome)).toEqual(['released']);
    expect((await history(tl.ledger, ids[5]!))[0]?.error).toContain('no outcome for item');
  });

  test('a lost lease on one item keeps it from being finalized; the others are unaffected', async () => {
    let stolen: string | undefined;
    const { tl, queue, producer } = await setUp({
      b: defineBatchHandler<N>({
        batch: { max: 4, maxWaitMs: 5_000 },
        handle: async (jobs) => {
          if (stolen === undefined) {
            stolen = jobs[1]!.id;
            await stealLease(tl!, stolen);
          }
          return Object.fromEntries(jobs.map((j) => [j.id, { outcome: 'complete' as const }]));
        },
      }),
    });
    const ids = (await producer.enqueueMany([0, 1, 2, 3].map((n) => ({ queue, type: 'b', payload: { n } })))).map(
      (r) => r.id,
    );
    await waitFor(
      async () => ((await itemCount(tl.ledger, queue, 'completed')) === 3 ? true : undefined),
      20_000,
      'three completed',
    );
    const states = await Promise.all(ids.map(async (id) => (await mustGet(tl.ledger, id)).state));
    expect(states.filter((s) => s === 'completed')).toHaveLength(3);
    expect(await mustGet(tl.ledger, stolen!)).toMatchObject({
      state: 'processing',
      leaseToken: 'stolen-by-another-holder',
    });
  });

  test('ctx.transaction commits writes and every completion, or nothing: a lost lease rolls it all back', async () => {
    let round = 0;
    const { tl, queue, producer } = await setUp({
      b: defineBatchHandler<N>({
        batch: { max: 3, maxWaitMs: 300 },
        handle: async (jobs: Job<N>[], ctx) => {
          round++;
          if (round === 1) await stealLease(tl!, jobs[0]!.id);
          return ctx.transaction(async (trx) => {
            for (const j of jobs) await sql`INSERT INTO batch_writes (item_id) VALUES (${j.id})`.execute(trx);
            return Object.fromEntries(jobs.map((j) => [j.id, { outcome: 'complete' as const, result: round }]));
          });
        },
      }),
    });
    const ids = (await producer.enqueueMany([0, 1, 2].map((n) => ({ queue, type: 'b', payload: { n } })))).map(
      (r) => r.id,
    );
    // Round 1 loses one CAS: nothing commits, the two still held are retried and complete in round 2 with their writes.
    await waitFor(
      async () => ((await itemCount(tl.ledger, queue, 'completed')) === 2 ? true : undefined),
      20_000,
      'two completed',
    );
    const writes = (await sql<{ item_id: string }>`SELECT item_id FROM batch_writes`.execute(tl.ledger.db)).rows.map(
      (r) => r.item_id,
    );
    // Sorted here, not by the server: the test table's collation ignores case, ids do not.
    expect(writes.sort()).toEqual([ids[1]!, ids[2]!].sort());
    for (const id of [ids[1]!, ids[2]!]) {
      expect(await mustGet(tl.ledger, id)).toMatchObject({ state: 'completed', attempt: 2, result: 2 });
      expect((await history(tl.ledger, id)).map((h) => h.outcome)).toEqual(['retried', 'completed']);
    }
    expect(await mustGet(tl.ledger, ids[0]!)).toMatchObject({
      state: 'processing',
      leaseToken: 'stolen-by-another-holder',
    });
  });

  test(
    'maxWaitMs runs a batch that never fills, with a trickle of ' +
      'items; a batch takes no more items than free slots',
    async () => {
      const sizes: number[] = [];
      const { tl, queue, producer } = await setUp(
        {
          b: defineBatchHandler<N>({
            batch: { max: 100, maxWaitMs: 200 },
            handle: async (jobs) => {
              sizes.push(jobs.length);
              return Object.fromEntries(jobs.map((j) => [j.id, { outcome: 'complete' as const }]));
            },
          }),
        },
        4,
      );
      for (let n = 0; n < 5; n++) {
        await producer.enqueue({ queue, type: 'b', payload: { n } });
        await new Promise((r) => setImmediate(r));
      }
      await waitFor(
        async () => ((await itemCount(tl.ledger, queue, 'completed')) === 5 ? true : undefined),
        20_000,
        'the trickle completed',
      );
      await producer.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ queue, type: 'b', payload: { n } })));
      await waitFor(
        async () => ((await itemCount(tl.ledger, queue, 'completed')) === 25 ? true : undefined),
        20_000,
        'the burst completed',
      );
      expect(sizes.reduce((a, b) => a + b, 0)).toBe(25);
      expect(Math.max(...sizes)).toBeLessThanOrEqual(4);
    },
  );

  test('bad batch options are a ValidationError naming the field', () => {
    for (const [batch, field] of [
      [{ max: 0, maxWaitMs: 10 }, 'batch.max'],
      [{ max: 5, maxWaitMs: -1 }, 'batch.maxWaitMs'],
      [{ max: 5 }, 'batch.maxWaitMs'],
    ] as const) {
      let caught: unknown;
      try {
        defineBatchHandler({ batch: batch as { max: number; maxWaitMs: number }, handle: async () => ({}) });
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(ValidationError);
      expect((caught as ValidationError).fields).toEqual([field]);
    }
  });
});
