import { sql } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { ConcurrencyLimits } from '../../types.js';
import { handOnKeys } from './hand-on.js';
import { keyRowLimit, readKeyRules, typeOfKey } from './scope.js';
import { sendEach } from '../common/pipeline.js';
import { writeQueueSetting } from '../queues/queue-settings.js';

// The limits per concurrency key as an operator sets and reads them: a
// queue's (lw_queues.key_limit) or a type's own (lw_type_limits), the
// limits of a queue as set now, and one key's standing against its limit,
// for explain.

/**
 * Sets (or, with null, lifts) a queue's limit per concurrency key, or with
 * `type` that type's own, then lets each key of that scope with items
 * waiting take the slots the new limit frees, a key per transaction.
 * Returns how many keys had items waiting.
 */
export async function setKeyLimit(
  db: LedgerDb,
  t: LedgerTables,
  queue: string,
  limit: number | null,
  type?: string,
): Promise<number> {
  if (type === undefined) await writeQueueSetting(db, t, queue, 'key_limit', limit);
  else await writeTypeLimit(db, t, queue, type, limit);
  const lines = await sql<{ ckey: string }>`SELECT DISTINCT ckey FROM ${t.keyWaits} WHERE queue = ${queue}`.execute(db);
  const keys = lines.rows.filter((r) => typeOfKey(r.ckey) === (type ?? null));
  for (const r of keys)
    await db.transaction().execute((trx) => handOnKeys(sendEach(trx), t, [{ queue, key: r.ckey, n: 0, admit: 0 }]));
  return keys.length;
}

/** A key row's admitted count and the limit it answers to (null: none), for explain; `key` is the stored key. */
export async function keyStanding(
  exec: Executor,
  t: LedgerTables,
  queue: string,
  key: string,
): Promise<{ admitted: number; limit: number | null; waiting: number }> {
  const limit = keyRowLimit(t, { queue, key });
  const r = await sql<{ admitted: number | string | null; key_limit: number | null; waiting: number | string }>`SELECT
      (SELECT admitted FROM ${t.keys} WHERE queue = ${queue} AND ckey = ${key}) AS admitted,
      ${limit} AS key_limit,
      (SELECT COUNT(*) FROM ${t.keyWaits} WHERE queue = ${queue} AND ckey = ${key}) AS waiting`.execute(exec);
  const row = r.rows[0];
  return {
    admitted: Number(row?.admitted ?? 0),
    limit: row?.key_limit === null || row?.key_limit === undefined ? null : Number(row.key_limit),
    waiting: Number(row?.waiting ?? 0),
  };
}

/** A queue's limit per key and its types' own, as set now. */
export async function readKeyLimits(exec: Executor, t: LedgerTables, queue: string): Promise<ConcurrencyLimits> {
  const rules = await readKeyRules(exec, t, [queue]);
  return {
    queue,
    limit: rules.queues.get(queue)?.limit ?? null,
    types: Object.fromEntries(rules.types.map((l) => [l.type, l.limit])),
  };
}

/** Sets (or, with null, lifts) a type's own limit per concurrency key in `queue`. */
async function writeTypeLimit(
  exec: Executor,
  t: LedgerTables,
  queue: string,
  type: string,
  limit: number | null,
): Promise<void> {
  if (limit === null) await sql`DELETE FROM ${t.typeLimits} WHERE queue = ${queue} AND type = ${type}`.execute(exec);
  else
    await sql`INSERT INTO ${t.typeLimits} (queue, type, key_limit, updated_at) VALUES (${queue}, ${type}, ${
      limit
    }, NOW(6))
      ON DUPLICATE KEY UPDATE key_limit = ${limit}, updated_at = NOW(6)`.execute(exec);
}
