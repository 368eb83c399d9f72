import { sql } from 'kysely';
import type { Executor, LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import type { ConcurrencyLimits } from '../types.js';
import { handOnKeys } from './key-admission.js';
import { typeOfKey, writeTypeLimit } from './key-scope.js';
import { sendEach } from './pipeline.js';
import { writeQueueSetting } from './queue-settings.js';

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
export async function setKeyLimit(db: LedgerDb, t: LedgerTables, queue: string, limit: number | null, type?: string): Promise<number> {
  if (type === undefined) await writeQueueSetting(db, t, queue, 'key_limit', limit);
  else await writeTypeLimit(db, t, queue, type, limit);
  const lines = await sql<{ ckey: string }>`SELECT DISTINCT ckey FROM ${t.keyWaits} WHERE queue = ${queue}`.execute(db);
  const keys = lines.rows.filter((r) => typeOfKey(r.ckey) === (type ?? null));
  for (const r of keys) await db.transaction().execute((trx) => handOnKeys(sendEach(trx), t, [{ queue, key: r.ckey, n: 0, admit: 0 }]));
  return keys.length;
}

/** A key row's admitted count and the limit it answers to (null: none), for explain; `key` is the stored key. */
export async function keyStanding(exec: Executor, t: LedgerTables, queue: string, key: string): Promise<{ admitted: number; limit: number | null; waiting: number }> {
  const type = typeOfKey(key);
  const limit =
    type === null
      ? sql`(SELECT key_limit FROM ${t.queues} WHERE queue = ${queue})`
      : sql`(SELECT key_limit FROM ${t.typeLimits} WHERE queue = ${queue} AND type = ${type})`;
  const r = await sql<{ admitted: number | string | null; key_limit: number | null; waiting: number | string }>`SELECT
      (SELECT admitted FROM ${t.keys} WHERE queue = ${queue} AND ckey = ${key}) AS admitted,
      ${limit} AS key_limit,
      (SELECT COUNT(*) FROM ${t.keyWaits} WHERE queue = ${queue} AND ckey = ${key}) AS waiting`.execute(exec);
  const row = r.rows[0];
  return { admitted: Number(row?.admitted ?? 0), limit: row?.key_limit === null || row?.key_limit === undefined ? null : Number(row.key_limit), waiting: Number(row?.waiting ?? 0) };
}

/** A queue's limit per key and its types' own, as set now. */
export async function readKeyLimits(exec: Executor, t: LedgerTables, queue: string): Promise<ConcurrencyLimits> {
  const r = await sql<{ type: string | null; key_limit: number | null }>`SELECT NULL AS type, key_limit FROM ${t.queues} WHERE queue = ${queue}
    UNION ALL SELECT type, key_limit FROM ${t.typeLimits} WHERE queue = ${queue} ORDER BY type`.execute(exec);
  const types: Record<string, number> = {};
  let limit: number | null = null;
  for (const row of r.rows) {
    if (row.type === null) limit = row.key_limit === null ? null : Number(row.key_limit);
    else if (row.key_limit !== null) types[row.type] = Number(row.key_limit);
  }
  return { queue, limit, types };
}
