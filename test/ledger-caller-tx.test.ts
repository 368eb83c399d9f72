import { Kysely, MysqlDialect, sql } from 'kysely';
import { createPool } from 'mysql2';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { TransactionRolledBackError } from '../src/errors.js';
import { mysqlPoolOptions } from '../src/ledger/connection.js';
import { Producer } from '../src/producer/producer.js';
import type { EnqueueResult } from '../src/ledger/types.js';
import { freshQueue, itemCount, laneRow } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// Idempotent enqueues inside callers' transactions, under contention: many
// callers enqueue one idempotency key at once, some of them rolling back. A
// duplicate insert takes a shared lock on the winner's key; a locking re-read
// of the key by several of them deadlocked, the server rolled back their
// transactions, and the savepoint they rolled back to was gone.

interface AppDB {
  app_rows: { id: number; caller: string };
}

let tl: TestLedger;
/**
 * The caller's own pool, as an application has: the server's default isolation (REPEATABLE
 * READ), one statement per query.
 */
let app: Kysely<AppDB>;

beforeAll(async () => {
  tl = await createTestLedger();
  await sql`CREATE TABLE app_rows (id INT PRIMARY KEY, caller VARCHAR(64) NOT NULL) ENGINE=InnoDB`.execute(
    tl.ledger.db,
  );
  const { multipleStatements: _dropped, ...options } = mysqlPoolOptions({ url: tl.url, poolSize: 40 });
  app = new Kysely<AppDB>({
    dialect: new MysqlDialect({ pool: createPool({ ...options, multipleStatements: false }) }),
  });
});
afterAll(async () => {
  await app?.destroy();
  await tl?.drop();
});

/** Resolves once `n` callers are waiting on it. */
function barrier(n: number): () => Promise<void> {
  let waiting = 0;
  let release: () => void = () => undefined;
  const all = new Promise<void>((r) => (release = r));
  return () => {
    waiting += 1;
    if (waiting === n) release();
    return all;
  };
}

let nextRowId = 1;
const savepointError = (e: unknown): boolean =>
  /savepoint/i.test(String((e as Error)?.message)) || (e as { errno?: unknown })?.errno === 1305;

async function appRows(ids: readonly number[]): Promise<number> {
  if (ids.length === 0) return 0;
  const r = await sql<{
    n: number | string;
  }>`SELECT COUNT(*) AS n FROM app_rows WHERE id IN (${sql.join(ids)})`.execute(tl.ledger.db);
  return Number(r.rows[0]?.n);
}

/**
 * Whether the session is in the middle of a statement like `statement`
 * (waiting on a lock: the statements here take microseconds otherwise). PROCESSLIST, not INNODB_TRX:
 * MariaDB refreshes INNODB_TRX only after 100 ms without a read of it, so a
 * poll faster than that sees one frozen picture.
 */
async function running(threadId: number, statement: RegExp): Promise<boolean> {
  const r = await sql<{
    info: string | null;
  }>`SELECT info FROM information_schema.PROCESSLIST WHERE id = ${threadId}`.execute(tl.ledger.db);
  return statement.test(r.rows[0]?.info ?? '');
}

async function threadOf(trx: Kysely<AppDB>): Promise<number> {
  const r = await sql<{ id: number | string }>`SELECT CONNECTION_ID() AS id`.execute(trx);
  return Number(r.rows[0]?.id);
}

describe.each([
  ['laneless', undefined],
  ['laned', 'L'],
] as const)('%s items', (_label, lane) => {
  test('24 concurrent producer.transaction callers, one key, half rolling back: commits hold, one item', async () => {
    const queue = freshQueue(`caller-tx-${lane ?? 'none'}`);
    const producer = new Producer({ ledger: tl.ledger });
    const callers = 24;
    const ready = barrier(callers);
    const runs = new Array<number>(callers).fill(0);
    const rowIds = Array.from({ length: callers }, () => nextRowId++);
    const outcomes = await Promise.allSettled(
      Array.from({ length: callers }, (_, k) =>
        producer.transaction(app, async (tx) => {
          runs[k] = (runs[k] ?? 0) + 1;
          await sql`SELECT 1`.execute(tx.trx);
          if (runs[k] === 1) await ready(); // every transaction is open before any of them enqueues
          await tx.trx
            .insertInto('app_rows')
            .values({ id: rowIds[k]!, caller: `c${k}` })
            .execute();
          const r = await tx.enqueue({
            queue,
            type: 't',
            payload: { order: 1 },
            idempotencyKey: 'same-key',
            ...(lane ? { lane } : {}),
          });
          if (k % 2 === 1) throw new Error('caller rolls back');
          return r;
        }),
      ),
    );

    const errors = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
    expect(errors.filter(savepointError), 'no savepoint error surfaces').toEqual([]);
    outcomes.forEach((o, k) => {
      if (k % 2 === 1)
        expect(o.status === 'rejected' && (o.reason as Error).message, `caller ${k}`).toBe('caller rolls back');
      else
        expect(o.status === 'fulfilled' ? 'committed' : String((o.reason as Error)?.message), `caller ${k}`).toBe(
          'committed',
        );
    });
    expect(await itemCount(tl.ledger, queue)).toBe(1);
    const committed = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value as EnqueueResult] : []));
    const item = await sql<{ id: string }>`SELECT id FROM ${tl.ledger.tables.items} WHERE queue = ${queue}`.execute(
      tl.ledger.db,
    );
    expect(new Set(committed.map((r) => r.id))).toEqual(new Set([item.rows[0]?.id]));
    expect(committed.filter((r) => !r.duplicate)).toHaveLength(1);
    expect(await appRows(rowIds.filter((_, k) => k % 2 === 0))).toBe(callers / 2);
    expect(await appRows(rowIds.filter((_, k) => k % 2 === 1))).toBe(0);
    if (lane) expect(await laneRow(tl.ledger, queue, lane)).toEqual({ nextSeq: 1, busy: true });
  });

  test(
    '20 callers enqueue one key through ledger.enqueue({ transaction }) at once: ' +
      'no raw server error, and each commits when it reruns on a retryable one',
    async () => {
      const queue = freshQueue(`caller-race-${lane ?? 'none'}`);
      const callers = 20;
      const ready = barrier(callers);
      const raw: unknown[] = [];
      const rowIds = Array.from({ length: callers }, () => nextRowId++);
      const results = await Promise.all(
        Array.from({ length: callers }, async (_, k) => {
          // What a caller of the plain API does: run the transaction again on an error that says it is retryable.
          for (let run = 1; ; run++) {
            try {
              return await app.transaction().execute(async (trx) => {
                await trx
                  .insertInto('app_rows')
                  .values({ id: rowIds[k]!, caller: `c${k}` })
                  .execute();
                if (run === 1) await ready(); // every transaction holds a row before any of them enqueues
                return tl.ledger.enqueue(
                  { queue, type: 't', payload: { order: 1 }, idempotencyKey: 'raced-key', ...(lane ? { lane } : {}) },
                  { transaction: trx },
                );
              });
            } catch (error) {
              if ((error as { retryable?: unknown }).retryable !== true || run >= 10) {
                raw.push(error);
                return undefined;
              }
            }
          }
        }),
      );
      expect(raw.map((e) => `${(e as Error).name}: ${(e as Error).message}`)).toEqual([]);
      expect(await itemCount(tl.ledger, queue)).toBe(1);
      expect(new Set(results.map((r) => r?.id)).size).toBe(1);
      expect(results.filter((r) => r?.duplicate === false)).toHaveLength(1);
      expect(await appRows(rowIds)).toBe(callers);
    },
  );

  test('a direct enqueue({ transaction }) the server rolls back gets the typed retryable error', async () => {
    const queue = freshQueue(`caller-deadlock-${lane ?? 'none'}`);
    const victimRow = nextRowId++;
    const winnerRows = [nextRowId++, nextRowId++, nextRowId++];
    await sql`INSERT INTO app_rows (id, caller) VALUES (${victimRow}, 'seed')`.execute(tl.ledger.db);
    const input = { queue, type: 't', payload: {}, idempotencyKey: 'deadlock-key', ...(lane ? { lane } : {}) };

    // The winner enqueues the key first and keeps its transaction open; the
    // victim holds a row the winner then waits for; the victim's enqueue of the
    // same key waits on the winner's key and closes the cycle. The victim is the
    // one rolled back on every server: MariaDB and MySQL pick the transaction
    // with fewer changes, TiDB the one whose lock request closes the cycle.
    const winner = await app.startTransaction().execute();
    const victim = await app.startTransaction().execute();
    try {
      for (const id of winnerRows) await winner.insertInto('app_rows').values({ id, caller: 'winner' }).execute();
      const won = await tl.ledger.enqueue(input, { transaction: winner });
      await sql`UPDATE app_rows SET caller = 'victim' WHERE id = ${victimRow}`.execute(victim);
      const winnerThread = await threadOf(winner);
      const winnerUpdate = sql`UPDATE app_rows SET caller = 'winner' WHERE id = ${victimRow}`.execute(winner);
      await waitFor(() => running(winnerThread, /^\s*UPDATE/i), 10_000, 'the winner waiting on the victim');
      const got = await tl.ledger.enqueue(input, { transaction: victim }).then(
        (r) => ({ r }),
        (e: unknown) => ({ e }),
      );
      await winnerUpdate;
      await winner.commit().execute();
      expect('e' in got, 'the victim failed').toBe(true);
      const error = 'e' in got ? got.e : undefined;
      expect(savepointError(error), String(error)).toBe(false);
      expect(error).toBeInstanceOf(TransactionRolledBackError);
      expect((error as TransactionRolledBackError).retryable).toBe(true);
      expect((error as TransactionRolledBackError).errno).toBe(1213);
      expect(won.duplicate).toBe(false);
    } finally {
      await victim
        .rollback()
        .execute()
        .catch(() => undefined);
      if (!winner.isCommitted)
        await winner
          .rollback()
          .execute()
          .catch(() => undefined);
    }
    expect(await itemCount(tl.ledger, queue)).toBe(1);
  });

  test('producer.transaction runs the function again when the server rolled its transaction back', async () => {
    const queue = freshQueue(`caller-retry-${lane ?? 'none'}`);
    const producer = new Producer({ ledger: tl.ledger });
    const victimRow = nextRowId++;
    const winnerRows = [nextRowId++, nextRowId++, nextRowId++];
    await sql`INSERT INTO app_rows (id, caller) VALUES (${victimRow}, 'seed')`.execute(tl.ledger.db);
    const input = { queue, type: 't', payload: {}, idempotencyKey: 'retry-key', ...(lane ? { lane } : {}) };

    const winner = await app.startTransaction().execute();
    let won: EnqueueResult | undefined;
    let runs = 0;
    let victim: Promise<EnqueueResult> | undefined;
    try {
      for (const id of winnerRows) await winner.insertInto('app_rows').values({ id, caller: 'winner' }).execute();
      won = await tl.ledger.enqueue(input, { transaction: winner });
      let locked: () => void = () => undefined;
      const rowLocked = new Promise<void>((r) => (locked = r));
      let openGate: () => void = () => undefined;
      const gate = new Promise<void>((r) => (openGate = r));
      // As above: the winner waits on the victim's row, then the victim's enqueue closes the cycle.
      victim = producer.transaction(app, async (tx) => {
        runs += 1;
        await sql`UPDATE app_rows SET caller = 'victim' WHERE id = ${victimRow}`.execute(tx.trx);
        if (runs === 1) {
          locked();
          await gate;
        }
        return tx.enqueue(input);
      });
      await rowLocked;
      const winnerThread = await threadOf(winner);
      const winnerUpdate = sql`UPDATE app_rows SET caller = 'winner' WHERE id = ${victimRow}`.execute(winner);
      await waitFor(() => running(winnerThread, /^\s*UPDATE/i), 10_000, 'the winner waiting on the victim');
      openGate();
      await winnerUpdate;
      await winner.commit().execute();
    } finally {
      if (!winner.isCommitted)
        await winner
          .rollback()
          .execute()
          .catch(() => undefined);
    }
    const r = await victim;
    expect(runs).toBe(2);
    expect(r).toMatchObject({ id: won?.id, duplicate: true });
    const row = await sql<{ caller: string }>`SELECT caller FROM app_rows WHERE id = ${victimRow}`.execute(
      tl.ledger.db,
    );
    expect(row.rows[0]?.caller).toBe('victim');
    expect(await itemCount(tl.ledger, queue)).toBe(1);
  });
});
