import { sql } from 'kysely';
import { beforeEach, expect, test } from 'vitest';
import { handOnKeys } from '../src/ledger/sql/key-hand-on.js';
import { isGuardRefusal } from '../src/ledger/sql/guard.js';
import { sendEach, type Send } from '../src/ledger/sql/pipeline.js';
import { freshQueue } from './support/items.js';
import { testTxnMode, type TestLedger } from './support/ledger.js';
import { testScope } from './support/scope.js';

// The hand-on of a key's slot (docs/design.md §3, Concurrency keys) when the waiting item it read is cancelled
// before it is admitted: the key counts only what it admitted, and the slot goes to the next in line.

const scope = testScope();
let tl: TestLedger;
beforeEach(async () => {
  tl = await scope.ledger();
});

test('a waiting item cancelled between the read and the admission is passed over, uncounted, and the next one takes the slot', async () => {
  const queue = freshQueue('handon');
  await tl.ledger.setConcurrencyLimit(queue, 1);
  const [a, b, c] = await tl.ledger.enqueueMany(['a', 'b', 'c'].map((name) => ({ queue, type: 't', concurrencyKey: 'k', payload: { name } })));
  const [held] = (await tl.ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
  expect(held?.id).toBe(a!.id);
  const t = tl.ledger.tables;
  let batches = 0;
  const run = tl.ledger.db.transaction().execute(async (trx) => {
    const each = sendEach(trx);
    const send: Send = async (statements) => {
      // The second batch admits what the first read: b is cancelled (another connection) just before.
      if (++batches === 2) expect(await tl.ledger.cancel(b!.id)).toBe('cancelled');
      return each(statements);
    };
    await sql`UPDATE ${t.items} SET state = 'completed', terminal_at = NOW(6) WHERE id = ${a!.id}`.execute(trx);
    await handOnKeys(send, t, [{ queue, key: 'k', n: 1, admit: 1 }]);
  });
  const states = async (): Promise<unknown[]> => {
    const rows = await sql<{ id: string; state: string; is_head: number }>`SELECT id, state, is_head FROM ${t.items} WHERE queue = ${queue}`.execute(tl.ledger.db);
    const byId = new Map(rows.rows.map((r) => [r.id, [r.state, Number(r.is_head)]]));
    return [a!.id, b!.id, c!.id].map((id) => byId.get(id));
  };
  const admitted = async (): Promise<number> => {
    const key = await sql<{ admitted: number }>`SELECT admitted FROM ${t.keys} WHERE queue = ${queue} AND ckey = 'k'`.execute(tl.ledger.db);
    return Number(key.rows[0]?.admitted);
  };
  if (testTxnMode().tidbTxnMode === 'optimistic') {
    // TiDB optimistic: both deleted b's wait row, so the hand-on's COMMIT is refused (the ledger's callers run it again).
    await expect(run).rejects.toMatchObject({ errno: 9007 });
    expect(await states()).toEqual([['processing', 1], ['cancelled', 0], ['pending', 0]]);
    expect(await admitted()).toBe(1);
    return;
  }
  await run;
  expect(await states()).toEqual([
    ['completed', 1],
    ['cancelled', 0],
    ['pending', 1],
  ]);
  expect(await admitted()).toBe(1);
  const waits = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.keyWaits} WHERE queue = ${queue}`.execute(tl.ledger.db);
  expect(Number(waits.rows[0]?.n)).toBe(0);
});

test('with the COMMIT sent alongside, a waiting item cancelled between the read and the admission refuses the whole transaction, and the hand-on deciding step by step then passes it over', async () => {
  const queue = freshQueue('handon');
  await tl.ledger.setConcurrencyLimit(queue, 1);
  const [a, b, c] = await tl.ledger.enqueueMany(['a', 'b', 'c'].map((name) => ({ queue, type: 't', concurrencyKey: 'k', payload: { name } })));
  const [held] = (await tl.ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
  expect(held?.id).toBe(a!.id);
  const t = tl.ledger.tables;
  const handOn = (commitWhenSure: boolean, cancelFirst: boolean): Promise<unknown> => {
    let batches = 0;
    return tl.ledger.db.transaction().execute(async (trx) => {
      const each = sendEach(trx);
      const send: Send = async (statements, opts) => {
        if (cancelFirst && ++batches === 2) expect(await tl.ledger.cancel(b!.id)).toBe('cancelled');
        return each(statements, opts);
      };
      await sql`UPDATE ${t.items} SET state = 'completed', terminal_at = NOW(6) WHERE id = ${a!.id}`.execute(trx);
      await handOnKeys(send, t, [{ queue, key: 'k', n: 1, admit: 1 }], [], undefined, undefined, commitWhenSure);
    });
  };
  const states = async (): Promise<unknown[]> => {
    const rows = await sql<{ id: string; state: string; is_head: number }>`SELECT id, state, is_head FROM ${t.items} WHERE queue = ${queue}`.execute(tl.ledger.db);
    const byId = new Map(rows.rows.map((r) => [r.id, [r.state, Number(r.is_head)]]));
    return [a!.id, b!.id, c!.id].map((id) => byId.get(id));
  };
  const admitted = async (): Promise<number> => {
    const key = await sql<{ admitted: number }>`SELECT admitted FROM ${t.keys} WHERE queue = ${queue} AND ckey = 'k'`.execute(tl.ledger.db);
    return Number(key.rows[0]?.admitted);
  };
  const refused = await handOn(true, true).then(
    () => undefined,
    (error: unknown) => error,
  );
  // TiDB optimistic reads b as it was and refuses at COMMIT instead (a write conflict, which the ledger's callers run again).
  if (testTxnMode().tidbTxnMode === 'optimistic') expect(refused).toMatchObject({ errno: 9007 });
  else expect(isGuardRefusal(refused)).toBe(true);
  // Nothing of the hand-on stands: a is still held, c still waits, the key counts a.
  expect(await states()).toEqual([['processing', 1], ['cancelled', 0], ['pending', 0]]);
  expect(await admitted()).toBe(1);

  await handOn(false, false);
  expect(await states()).toEqual([
    ['completed', 1],
    ['cancelled', 0],
    ['pending', 1],
  ]);
  expect(await admitted()).toBe(1);
  const waits = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.keyWaits} WHERE queue = ${queue}`.execute(tl.ledger.db);
  expect(Number(waits.rows[0]?.n)).toBe(0);
});
