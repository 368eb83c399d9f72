import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import { affected, laneIn, list, nowPlusMs, queueScoped } from './common.js';

/**
 * Deletes terminal items (and their history) that ended more than
 * `olderThanMs` ago, at most `limit` per call, then the lane rows left with
 * no item at all.
 */
export async function purgeTerminal(
  db: LedgerDb,
  t: LedgerTables,
  opts: { olderThanMs: number; limit: number; queue?: string | undefined },
): Promise<number> {
  const queueFilter = opts.queue === undefined ? sql`` : sql`AND queue = ${opts.queue}`;
  const cutoff = nowPlusMs(-opts.olderThanMs);
  const rows = await sql<{ id: string; queue: string; lane: string | null }>`SELECT id, queue, lane FROM ${t.items}
    WHERE terminal_at < ${cutoff} ${queueFilter} LIMIT ${opts.limit}`.execute(db);
  if (rows.rows.length === 0) return 0;
  const ids = rows.rows.map((r) => r.id);
  const deleted = await db.transaction().execute(async (trx) => {
    await sql`DELETE FROM ${t.attempts} WHERE item_id IN (${list(ids)})`.execute(trx);
    const d = await sql`DELETE FROM ${t.items} WHERE id IN (${list(ids)}) AND terminal_at < ${cutoff}`.execute(trx);
    return affected(d);
  });
  const lanes = [...new Map(rows.rows.filter((r) => r.lane !== null).map((r) => [queueScoped(r.queue, r.lane ?? ''), r])).values()];
  if (lanes.length > 0) {
    // A lane row may go once nothing of the lane is left; enqueue locks the
    // same row, so a concurrent enqueue either sees it gone or keeps it alive.
    await sql`DELETE FROM ${t.lanes} WHERE active = 0
      AND ${laneIn(lanes)}
      AND NOT EXISTS (SELECT 1 FROM ${t.items} i WHERE i.queue = ${t.lanes}.queue AND i.lane = ${t.lanes}.lane)`.execute(db);
  }
  return deleted;
}
