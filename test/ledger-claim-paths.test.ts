import { Kysely, MysqlDialect } from 'kysely';
import { createPool } from 'mysql2';
import { afterEach, expect, test } from 'vitest';
import { mysqlPoolOptions, type LedgerDb } from '../src/ledger/connection.js';
import { Ledger } from '../src/ledger/ledger.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

// A claim sends its CAS and read-back as one query on the ledger's own pool
// (multipleStatements), and as two on a Kysely instance a caller hands in,
// whose pool may refuse several statements per query. Both must claim the
// same way.

let tl: TestLedger | undefined;
let external: Ledger | undefined;
afterEach(async () => {
  await external?.close();
  external = undefined;
  await tl?.drop();
});

function ledgerOnPlainPool(url: string): Ledger {
  const { multipleStatements: _dropped, ...options } = mysqlPoolOptions({ url, poolSize: 2 });
  const pool = createPool({ ...options, multipleStatements: false });
  const db: LedgerDb = new Kysely<Record<string, never>>({ dialect: new MysqlDialect({ pool }) });
  return new Ledger({ url }, db);
}

test.each([
  ['its own pool (one round trip)', false],
  ['a handed-in Kysely without multipleStatements (two)', true],
])('claim and claimByIds through %s', async (_label, plain) => {
  tl = await createTestLedger();
  const ledger = plain ? (external = ledgerOnPlainPool(tl.url)) : tl.ledger;
  const queue = 'paths';
  const made = await tl.ledger.enqueueMany(Array.from({ length: 6 }, (_, n) => ({ queue, type: 't', payload: { n } })));
  const ids = made.map((m) => m.id);

  const targeted = await ledger.claimByIds({ queue, owner: 'a', leaseMs: 10_000, ids: [ids[0]!, ids[1]!] });
  expect(targeted.map((i) => i.id).sort()).toEqual([ids[0], ids[1]].sort());
  expect(targeted.every((i) => i.state === 'processing' && i.attempt === 1 && i.leaseOwner === 'a')).toBe(true);
  expect(targeted[0]!.payload).toEqual({ n: ids.indexOf(targeted[0]!.id) });
  // Already claimed: nothing, and no error from an empty read-back.
  expect(await ledger.claimByIds({ queue, owner: 'b', leaseMs: 10_000, ids: [ids[0]!] })).toEqual([]);

  const rest = await ledger.claim({ queue, owner: 'c', leaseMs: 10_000, limit: 10 });
  expect(rest.items.map((i) => i.id).sort()).toEqual(ids.slice(2).sort());
  expect(new Set(rest.items.map((i) => i.leaseToken)).size).toBe(1);
  expect((await ledger.claim({ queue, owner: 'c', leaseMs: 10_000, limit: 10 })).items).toEqual([]);
  expect(await tl.ledger.countProcessing(queue)).toBe(6);
});
