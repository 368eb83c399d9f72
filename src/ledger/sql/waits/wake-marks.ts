import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { affected, NO_TIME, nowPlusMs } from '../common/fragments.js';

/**
 * The wake marks table (schema 4) holds, per dependency key, when it was
 * last woken. A wake and a block of one key each lock the key's row first,
 * in their own transactions, so the two are serialised: either the wake
 * commits first and the block sees its time, or the block commits first and
 * the wake finds the blocked item. Without it a wake that ran between the
 * handler's read of the awaited fact and its block found nothing to move,
 * and the item waited to its expiry.
 */

/** The wake side: records "woken now" and holds the key's row lock until the transaction ends. */
export async function markWoken(exec: Executor, t: LedgerTables, key: string): Promise<void> {
  await sql`INSERT INTO ${t.wakeMarks} (dependency_key, woken_at, touched_at) VALUES (${key}, NOW(6), NOW(6))
    ON DUPLICATE KEY UPDATE woken_at = NOW(6), touched_at = NOW(6)`.execute(exec);
}

/**
 * The block side: takes the key's row lock, making the row (never woken:
 * NO_TIME, before any attempt began) if the key has none. The caller then
 * reads the mark under that lock.
 */
export async function lockWakeMark(exec: Executor, t: LedgerTables, key: string): Promise<void> {
  await sql`INSERT INTO ${t.wakeMarks} (dependency_key, woken_at, touched_at) VALUES (${key}, ${NO_TIME}, NOW(6))
    ON DUPLICATE KEY UPDATE touched_at = NOW(6)`.execute(exec);
}

/**
 * Marks not touched for `olderThanMs` (at most `limit`). A mark only matters
 * to an attempt that began before its wake and blocks after it, so a day is
 * far longer than it must be kept.
 */
export async function purgeWakeMarks(
  exec: Executor,
  t: LedgerTables,
  olderThanMs: number,
  limit: number,
): Promise<number> {
  const r = await sql`DELETE FROM ${t.wakeMarks} WHERE touched_at < ${nowPlusMs(-olderThanMs)} LIMIT ${limit}`.execute(
    exec,
  );
  return affected(r);
}
