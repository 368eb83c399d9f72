// An idempotency key stands for one request (queue, type, payload, lane): a repeat is a
// duplicate, a different request under the key is refused (IdempotencyConflictError).
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { IdempotencyConflictError } from '../src/errors.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { migrate } from '../src/ledger/migrations.js';
import { Producer } from '../src/producer/producer.js';
import { freshQueue, itemCount, laneRow } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

async function refusal(p: Promise<unknown>): Promise<IdempotencyConflictError> {
  const e = await p.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(e).toBeInstanceOf(IdempotencyConflictError);
  return e as IdempotencyConflictError;
}

describe('one key, one request', () => {
  test(
    'the same request again is a duplicate, whatever the order ' +
      'of its payload keys, its timing, priority or attempts',
    async () => {
      const queue = freshQueue('idem-same');
      const first = await ledger.enqueue({
        queue,
        type: 't',
        payload: { a: 1, b: { x: [1, 2], y: 'z' } },
        lane: 'L',
        idempotencyKey: 'k',
      });
      const again = await ledger.enqueue({
        queue,
        type: 't',
        payload: { b: { y: 'z', x: [1, 2] }, a: 1 },
        lane: 'L',
        idempotencyKey: 'k',
        priority: 5,
        delayMs: 1000,
        maxAttempts: 3,
      });
      expect(again).toEqual({ id: first.id, duplicate: true, laneSeq: 1 });
      expect(await itemCount(ledger, queue)).toBe(1);
    },
  );

  test.each([
    ['another payload', { payload: { a: 2 } }],
    ['another type', { type: 'other' }],
    ['another lane', { lane: 'M' }],
    ['no lane where the first had one', { lane: undefined }],
    ['a payload whose array is in another order', { payload: { a: 1, list: [2, 1] } }],
  ])('%s under the key: refused, naming the key and the item, and nothing is written', async (_what, change) => {
    const queue = freshQueue('idem-diff');
    const base = {
      queue,
      type: 't',
      payload: { a: 1, list: [1, 2] } as unknown,
      lane: 'L' as string | undefined,
      idempotencyKey: 'order-7',
    };
    const first = await ledger.enqueue(base);
    const e = await refusal(ledger.enqueue({ ...base, ...(change as Partial<typeof base>) }));
    expect({ queue: e.queue, key: e.idempotencyKey, itemId: e.itemId, index: e.index }).toEqual({
      queue,
      key: 'order-7',
      itemId: first.id,
      index: undefined,
    });
    expect(e.message).toContain('"order-7"');
    expect(e.message).toContain(first.id);
    expect(await itemCount(ledger, queue)).toBe(1);
    expect(await laneRow(ledger, queue, 'M')).toBeUndefined();
    expect(await laneRow(ledger, queue, 'L')).toEqual({ nextSeq: 1, busy: true });
  });

  test('the same key in another queue is another key', async () => {
    const [q1, q2] = [freshQueue('idem-q1'), freshQueue('idem-q2')];
    const a = await ledger.enqueue({ queue: q1, type: 't', payload: 1, idempotencyKey: 'k' });
    const b = await ledger.enqueue({ queue: q2, type: 't', payload: 2, idempotencyKey: 'k' });
    expect(b.duplicate).toBe(false);
    expect(b.id).not.toBe(a.id);
  });
});

describe('batches', () => {
  test(
    'enqueueMany with one item conflicting with a stored key: the whole ' +
      'batch is refused, naming its index, and nothing is written',
    async () => {
      const queue = freshQueue('idem-batch');
      const stored = await ledger.enqueue({ queue, type: 't', payload: 'A', idempotencyKey: 'k' });
      const e = await refusal(
        ledger.enqueueMany([
          { queue, type: 't', payload: 'new', lane: 'L' },
          { queue, type: 't', payload: 'A', idempotencyKey: 'k' },
          { queue, type: 't', payload: 'B', idempotencyKey: 'k' },
          { queue, type: 't', payload: 'other', idempotencyKey: 'k2' },
        ]),
      );
      expect({ key: e.idempotencyKey, itemId: e.itemId, index: e.index }).toEqual({
        key: 'k',
        itemId: stored.id,
        index: 2,
      });
      expect(e.message).toMatch(/^items\[2\]: /);
      expect(await itemCount(ledger, queue)).toBe(1);
      expect(await laneRow(ledger, queue, 'L')).toBeUndefined();
    },
  );

  test(
    'two items of one batch with one key and different requests: ' +
      'refused, naming both places, and nothing is written',
    async () => {
      const queue = freshQueue('idem-in-batch');
      const e = await refusal(
        ledger.enqueueMany([
          { queue, type: 't', payload: 'x' },
          { queue, type: 't', payload: 'A', idempotencyKey: 'k' },
          { queue, type: 't', payload: 'B', idempotencyKey: 'k' },
        ]),
      );
      expect({ itemId: e.itemId, index: e.index, earlierIndex: e.earlierIndex }).toEqual({
        itemId: null,
        index: 2,
        earlierIndex: 1,
      });
      expect(await itemCount(ledger, queue)).toBe(0);
      // The same request twice in a batch stays one item and a duplicate.
      const ok = await ledger.enqueueMany([
        { queue, type: 't', payload: 'A', idempotencyKey: 'k' },
        { queue, type: 't', payload: 'A', idempotencyKey: 'k' },
      ]);
      expect(ok.map((r) => r.duplicate)).toEqual([false, true]);
      expect(ok[1]?.id).toBe(ok[0]?.id);
    },
  );

  test("in the caller's transaction: the refused enqueue writes nothing, the caller's own writes commit", async () => {
    const queue = freshQueue('idem-trx');
    const stored = await ledger.enqueue({ queue, type: 't', payload: 'A', idempotencyKey: 'k' });
    await sql`CREATE TABLE IF NOT EXISTS idem_app (id INT PRIMARY KEY)`.execute(ledger.db);
    const e = await ledger.db.transaction().execute(async (trx) => {
      await sql`INSERT INTO idem_app (id) VALUES (1)`.execute(trx);
      const refused = await refusal(
        ledger.enqueueMany(
          [
            { queue, type: 't', payload: 'fresh' },
            { queue, type: 't', payload: 'B', idempotencyKey: 'k' },
          ],
          { transaction: trx },
        ),
      );
      // The transaction goes on: the enqueue's savepoint was rolled back, nothing else.
      await ledger.enqueue({ queue, type: 't', payload: 'after' }, { transaction: trx });
      return refused;
    });
    expect({ itemId: e.itemId, index: e.index }).toEqual({ itemId: stored.id, index: 1 });
    expect(Number((await sql<{ n: number }>`SELECT COUNT(*) AS n FROM idem_app`.execute(ledger.db)).rows[0]?.n)).toBe(
      1,
    );
    expect(await itemCount(ledger, queue)).toBe(2);
  });

  test('producer.transaction: the refusal reaches the caller, whose transaction rolls back whole', async () => {
    const queue = freshQueue('idem-ptrx');
    const stored = await ledger.enqueue({ queue, type: 't', payload: 'A', idempotencyKey: 'k' });
    const producer = new Producer({ ledger });
    const e = await refusal(
      producer.transaction(ledger.db, (tx) => tx.enqueue({ queue, type: 't', payload: 'B', idempotencyKey: 'k' })),
    );
    expect(e.itemId).toBe(stored.id);
    expect(await itemCount(ledger, queue)).toBe(1);
  });

  test(
    'producer.enqueue: a refused enqueue fails alone, as a ' +
      'single enqueue, and the others batched with it are written',
    async () => {
      const queue = freshQueue('idem-batcher');
      const stored = await ledger.enqueue({ queue, type: 't', payload: 'A', idempotencyKey: 'k' });
      const producer = new Producer({ ledger });
      // Enough at once that they go out in shared batches (ENQUEUES_IN_FLIGHT).
      const outcomes = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          producer.enqueue({ queue, type: 't', payload: i === 7 ? 'B' : i, idempotencyKey: i === 7 ? 'k' : `k${i}` }),
        ),
      );
      outcomes.forEach((o, i) => {
        if (i !== 7) expect(o.status, `enqueue ${i}`).toBe('fulfilled');
      });
      const e = (outcomes[7] as PromiseRejectedResult).reason as IdempotencyConflictError;
      expect(e).toBeInstanceOf(IdempotencyConflictError);
      expect({ itemId: e.itemId, index: e.index }).toEqual({ itemId: stored.id, index: undefined });
      expect(await itemCount(ledger, queue)).toBe(20);
    },
  );
});

test('items stored before request digests (schema 13) keep answering duplicate: true after the upgrade', async () => {
  const old = await createTestLedger({}, false);
  try {
    await migrate(old.ledger.db, old.ledger.config.tablePrefix, 60, 11);
    const queue = freshQueue('idem-old');
    // Written as a ledger of schema 11 writes it: no digest column at all.
    await sql`INSERT INTO ${old.ledger.tables.items} (id, queue, type, payload, state, run_after, max_attempts,
      idempotency_key, created_at, updated_at,
        lease_owner, lease_token, lease_until, started_at)
      VALUES ('old-item-1', ${queue}, 't', '"A"', 'pending', NOW(6), 3, 'k', NOW(6), NOW(6), '', '',
      '1000-01-01 00:00:00', '1000-01-01 00:00:00')`.execute(old.ledger.db);
    await old.ledger.migrate();
    expect(await old.ledger.enqueue({ queue, type: 't', payload: 'B', idempotencyKey: 'k' })).toEqual({
      id: 'old-item-1',
      duplicate: true,
      laneSeq: null,
    });
    // A key enqueued after the upgrade has its digest.
    const fresh = await old.ledger.enqueue({ queue, type: 't', payload: 'A', idempotencyKey: 'k2' });
    expect((await refusal(old.ledger.enqueue({ queue, type: 't', payload: 'B', idempotencyKey: 'k2' }))).itemId).toBe(
      fresh.id,
    );
  } finally {
    await old.drop();
  }
});
