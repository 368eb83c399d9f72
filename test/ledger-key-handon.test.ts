import { sql } from 'kysely';
import { beforeEach, expect, test } from 'vitest';
import { isGuardRefusal } from '../src/ledger/sql/common/guard.js';
import { handOnKeys } from '../src/ledger/sql/keys/hand-on.js';
import { sendEach, type Send } from '../src/ledger/sql/common/pipeline.js';
import { freshQueue } from './support/items.js';
import { testTxnMode, type TestLedger } from './support/ledger.js';
import { testScope } from './support/scope.js';

// The hand-on of a key's slot (docs/design/keys.md, Concurrency keys) when the waiting item it read is cancelled
// before it is admitted: the key counts only what it admitted, and the slot goes to the next in line.

const scope = testScope();
let tl: TestLedger;
beforeEach(async () => {
  tl = await scope.ledger();
});

/** Key k with limit 1: a claimed and held, b and c waiting. */
async function keyWithTwoWaiting(): Promise<{ queue: string; a: string; b: string; c: string }> {
  const queue = freshQueue('handon');
  await tl.ledger.setConcurrencyLimit(queue, 1);
  const [a, b, c] = await tl.ledger.enqueueMany(
    ['a', 'b', 'c'].map((name) => ({ queue, type: 't', concurrencyKey: 'k', payload: { name } })),
  );
  const [held] = (await tl.ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
  expect(held?.id).toBe(a!.id);
  return { queue, a: a!.id, b: b!.id, c: c!.id };
}

/**
 * Ends `a` and hands its slot on, in a transaction whose hand-on takes one
 * statement a round trip; with `cancelBetween`, b is cancelled from another
 * connection just before the second, which admits what the first read.
 */
function endAndHandOn(
  key: { queue: string; a: string; b: string },
  opts: { cancelBetween: boolean; commitWhenSure: boolean },
): Promise<void> {
  const t = tl.ledger.tables;
  let batches = 0;
  return tl.ledger.db.transaction().execute(async (trx) => {
    const each = sendEach(trx);
    const send: Send = async (statements, sendOpts) => {
      if (opts.cancelBetween && ++batches === 2) expect(await tl.ledger.cancel(key.b)).toBe('cancelled');
      return each(statements, sendOpts);
    };
    await sql`UPDATE ${t.items} SET state = 'completed', terminal_at = NOW(6) WHERE id = ${key.a}`.execute(trx);
    await handOnKeys(
      send,
      t,
      [{ queue: key.queue, key: 'k', n: 1, admit: 1 }],
      [],
      undefined,
      undefined,
      opts.commitWhenSure,
    );
  });
}

/** Each item's [state, is_head], the key's count, and how many wait rows are left. */
async function standing(key: {
  queue: string;
  a: string;
  b: string;
  c: string;
}): Promise<{ items: unknown[]; admitted: number; waits: number }> {
  const t = tl.ledger.tables;
  const rows = await sql<{
    id: string;
    state: string;
    is_head: number;
  }>`SELECT id, state, is_head FROM ${t.items} WHERE queue = ${key.queue}`.execute(tl.ledger.db);
  const byId = new Map(rows.rows.map((r) => [r.id, [r.state, Number(r.is_head)]]));
  const row = await sql<{
    admitted: number;
  }>`SELECT admitted FROM ${t.keys} WHERE queue = ${key.queue} AND ckey = 'k'`.execute(tl.ledger.db);
  const waits = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.keyWaits} WHERE queue = ${key.queue}`.execute(
    tl.ledger.db,
  );
  return {
    items: [key.a, key.b, key.c].map((id) => byId.get(id)),
    admitted: Number(row.rows[0]?.admitted),
    waits: Number(waits.rows[0]?.n),
  };
}

const UNTOUCHED = {
  items: [
    ['processing', 1],
    ['cancelled', 0],
    ['pending', 0],
  ],
  admitted: 1,
  waits: 1,
};
const HANDED_TO_C = {
  items: [
    ['completed', 1],
    ['cancelled', 0],
    ['pending', 1],
  ],
  admitted: 1,
  waits: 0,
};

test(
  'a waiting item cancelled between the read and the admission is ' +
    'passed over, uncounted, and the next one takes the slot',
  async () => {
    const key = await keyWithTwoWaiting();
    const run = endAndHandOn(key, { cancelBetween: true, commitWhenSure: false });
    if (testTxnMode().tidbTxnMode === 'optimistic') {
      // TiDB optimistic: both deleted b's wait row, so the hand-on's COMMIT is refused (the
      // ledger's callers run it again).
      await expect(run).rejects.toMatchObject({ errno: 9007 });
      expect(await standing(key)).toEqual(UNTOUCHED);
      return;
    }
    await run;
    expect(await standing(key)).toEqual(HANDED_TO_C);
  },
);

test(
  'with the COMMIT sent alongside, a waiting item cancelled between the read and the admission ' +
    'refuses the whole transaction, and the hand-on deciding step by step then passes it over',
  async () => {
    const key = await keyWithTwoWaiting();
    const refused = await endAndHandOn(key, { cancelBetween: true, commitWhenSure: true }).then(
      () => undefined,
      (error: unknown) => error,
    );
    // TiDB optimistic reads b as it was and refuses at COMMIT instead (a write conflict, which the
    // ledger's callers run again).
    if (testTxnMode().tidbTxnMode === 'optimistic') expect(refused).toMatchObject({ errno: 9007 });
    else expect(isGuardRefusal(refused)).toBe(true);
    // Nothing of the hand-on stands: a is still held, c still waits, the key counts a.
    expect(await standing(key)).toEqual(UNTOUCHED);
    await endAndHandOn(key, { cancelBetween: false, commitWhenSure: false });
    expect(await standing(key)).toEqual(HANDED_TO_C);
  },
);
