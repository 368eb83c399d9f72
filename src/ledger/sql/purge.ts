import { sql, type RawBuilder } from 'kysely';
import type { LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import { affected, laneIn, list, NO_TIME, nowPlusMs, queueScoped } from './common.js';

/** Ended before `cutoff`: a terminal time is set (not NO_TIME) and older. */
const TERMINAL_BEFORE = (cutoff: RawBuilder<unknown>): RawBuilder<unknown> => sql`terminal_at > ${NO_TIME} AND terminal_at < ${cutoff}`;

/**
 * Deletes terminal items (and their history and steps) that ended more than
 * `olderThanMs` ago, at most `limit` per call, then the lane rows left with
 * no item at all.
 */
export async function purgeTerminal(
  db: LedgerDb,
  t: LedgerTables,
  opts: { olderThanMs: number; limit: number; queue?: string | undefined },
): Promise<number> {
  const queueFilter = opts.queue === undefined ? sql`` : sql`queue = ${opts.queue} AND`;
  const cutoff = nowPlusMs(-opts.olderThanMs);
  // An item ends after it was created, so creation time before the cutoff is
  // necessary for a terminal time before it, and creation time is indexed
  // (ix_created) because it never changes, unlike the terminal time.
  const rows = await sql<{ id: string; queue: string; lane: string | null }>`SELECT id, queue, lane FROM ${t.items}
    WHERE ${queueFilter} created_at < ${cutoff} AND ${TERMINAL_BEFORE(cutoff)}
    ORDER BY created_at LIMIT ${opts.limit}`.execute(db);
  if (rows.rows.length === 0) return 0;
  const ids = rows.rows.map((r) => r.id);
  const deleted = await db.transaction().execute(async (trx) => {
    await sql`DELETE FROM ${t.attempts} WHERE item_id IN (${list(ids)})`.execute(trx);
    await sql`DELETE FROM ${t.steps} WHERE item_id IN (${list(ids)})`.execute(trx);
    const d = await sql`DELETE FROM ${t.items} WHERE id IN (${list(ids)}) AND ${TERMINAL_BEFORE(cutoff)}`.execute(trx);
    return affected(d);
  });
  const lanes = [...new Map(rows.rows.filter((r) => r.lane !== null).map((r) => [queueScoped(r.queue, r.lane ?? ''), r])).values()];
  if (lanes.length > 0) {
    // A lane row may go once nothing of the lane is left; enqueue locks the
    // same row, so a concurrent enqueue either sees it gone or keeps it alive.
    await sql`DELETE FROM ${t.lanes} WHERE busy_from = 0
      AND ${laneIn(lanes)}
      AND NOT EXISTS (SELECT 1 FROM ${t.items} i WHERE i.queue = ${t.lanes}.queue AND i.lane = ${t.lanes}.lane)`.execute(db);
  }
  return deleted;
}
