import { Kysely, MysqlDialect, sql } from 'kysely';
import { createPool } from 'mysql2';
import { afterEach, expect, test } from 'vitest';
import { mysqlPoolOptions, type LedgerDb } from '../src/ledger/connection.js';
import { Ledger } from '../src/ledger/ledger.js';
import { pipelined } from '../src/ledger/sql/pipeline.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

// A pipelined transaction sends BEGIN with its first round trip and COMMIT
// with its last on the ledger's own pool (multipleStatements), and one
// statement per round trip inside a Kysely transaction on a handed-in pool.
// Either way it must be one transaction: all or nothing, and nothing left open.

let tl: TestLedger | undefined;
let external: Ledger | undefined;
afterEach(async () => {
  await external?.close();
  external = undefined;
  await tl?.drop();
});

function ledgerOnPlainPool(url: string): Ledger {
  const { multipleStatements: _dropped, ...options } = mysqlPoolOptions({ url, poolSize: 1 });
  const pool = createPool({ ...options, multipleStatements: false });
  const db: LedgerDb = new Kysely<Record<string, never>>({ dialect: new MysqlDialect({ pool }) });
  return new Ledger({ url }, db);
}

const paths = [
  ['its own pool (BEGIN and COMMIT ride along)', false],
  ['a handed-in Kysely without multipleStatements (one statement per round trip)', true],
] as const;

test.each(paths)('a pipelined transaction whose last round trip fails writes nothing and leaves no transaction open, through %s', async (_label, plain) => {
  tl = await createTestLedger({ poolSize: 1 });
  const ledger = plain ? (external = ledgerOnPlainPool(tl.url)) : tl.ledger;
  const t = ledger.tables;
  const lane = (name: string) => sql`INSERT INTO ${t.lanes} (queue, lane, next_seq, active) VALUES ('q', ${name}, 1, 1)`;
  await expect(
    pipelined(ledger.db, !plain, async (send) => {
      const [first] = await send([lane('a')]);
      expect(first?.affected).toBe(1);
      await send([lane('b'), sql`INSERT INTO lanewake_no_such_table VALUES (1)`], { commit: true });
    }),
  ).rejects.toThrow(/lanewake_no_such_table/);
  const rows = await sql<{ lane: string }>`SELECT lane FROM ${t.lanes}`.execute(ledger.db);
  expect(rows.rows).toEqual([]);
  // One connection in the pool: the statement above ran on the one the failed transaction used.
  const open = await sql<{ t: number }>`SELECT @@in_transaction AS t`.execute(ledger.db);
  expect(Number(open.rows[0]?.t)).toBe(0);

  // And a transaction that succeeds commits every round trip's writes, reads included in order.
  const read = await pipelined(ledger.db, !plain, async (send) => {
    await send([lane('c')]);
    const [, r] = await send([lane('d'), sql`SELECT lane FROM ${t.lanes} ORDER BY lane`], { commit: true });
    return r?.rows;
  });
  expect(read).toEqual([{ lane: 'c' }, { lane: 'd' }]);
  expect((await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.lanes}`.execute(ledger.db)).rows[0]?.n).toBe(2);
});

test.each(paths)('laned enqueues get gap-free sequences and one head per lane through %s', async (_label, plain) => {
  tl = await createTestLedger();
  const ledger = plain ? (external = ledgerOnPlainPool(tl.url)) : tl.ledger;
  const queue = 'seq';
  const first = await ledger.enqueueMany([
    { queue, type: 't', payload: 1, lane: 'A' },
    { queue, type: 't', payload: 2, lane: 'B' },
    { queue, type: 't', payload: 3, lane: 'A' },
  ]);
  const second = await ledger.enqueue({ queue, type: 't', payload: 4, lane: 'A' });
  expect([...first, second].map((r) => r.laneSeq)).toEqual([1, 1, 2, 3]);
  const heads = await Promise.all([...first, second].map(async (r) => (await ledger.get(r.id))?.isHead));
  expect(heads).toEqual([true, true, false, false]);
});

test.each(paths)('payloads and keys with quotes, backslashes and question marks round-trip in one INSERT beside a bound date, through %s', async (_label, plain) => {
  tl = await createTestLedger();
  const ledger = plain ? (external = ledgerOnPlainPool(tl.url)) : tl.ledger;
  const queue = 'escape';
  const tricky = ["it's ?", 'back\\slash \\\' ?', '"double" ? `tick`', 'naïve ☃ \u0000 nul', '?, ?); DROP TABLE x; --'];
  const runAt = new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 678));
  const inputs = tricky.map((text, i) => ({
    queue,
    type: 't',
    payload: { text, n: i },
    lane: `lane ${text}`,
    idempotencyKey: i === 1 ? `key ${text}` : undefined,
    ...(i === 2 ? { runAt } : {}),
  }));
  const made = await ledger.enqueueMany(inputs.map(({ idempotencyKey, ...rest }) => (idempotencyKey === undefined ? rest : { ...rest, idempotencyKey })));
  for (const [i, r] of made.entries()) {
    const item = await ledger.get(r.id);
    expect(item?.payload, tricky[i]).toEqual({ text: tricky[i], n: i });
    expect(item?.lane).toBe(`lane ${tricky[i]}`);
  }
  expect((await ledger.get(made[1]!.id))?.idempotencyKey).toBe(`key ${tricky[1]}`);
  expect((await ledger.get(made[2]!.id))?.runAfter.getTime()).toBe(runAt.getTime());
  // Lane-less too (the single-INSERT path), with a date in the same statement.
  const plainItems = await ledger.enqueueMany(tricky.map((text, i) => ({ queue, type: 't', payload: { text }, ...(i === 0 ? { runAt } : {}) })));
  for (const [i, r] of plainItems.entries()) expect((await ledger.get(r.id))?.payload).toEqual({ text: tricky[i] });
  expect((await ledger.get(plainItems[0]!.id))?.runAfter.getTime()).toBe(runAt.getTime());
});
