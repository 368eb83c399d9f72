import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { PurgeFilter } from '../../operator-types.js';
import { affected, laneIn, list, NO_TIME, nowPlusMs, queueScoped } from '../common/fragments.js';
import { deleteIdleKeys } from '../keys/idle-keys.js';
import { deleteSpentRateRows } from '../rates/rate-limits.js';

/** Ended before `cutoff`: a terminal time is set (not NO_TIME) and older. */
const TERMINAL_BEFORE = (cutoff: RawBuilder<unknown>): RawBuilder<unknown> =>
  sql`terminal_at > ${NO_TIME} AND terminal_at < ${cutoff}`;

type PurgeRow = { id: string; queue: string; lane: string | null; concurrency_key: string | null };

/**
 * Deletes terminal items (and their history and steps) that ended more than
 * `olderThanMs` ago, at most `limit` per call, then the lane rows left with
 * no item at all, the rows of their concurrency keys left holding nothing,
 * and rate-limit rows spent as long ago.
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
  const rows = await sql<PurgeRow>`SELECT id, queue, lane, concurrency_key FROM ${t.items}
    WHERE ${queueFilter} created_at < ${cutoff} AND ${TERMINAL_BEFORE(cutoff)}
    ORDER BY created_at LIMIT ${opts.limit}`.execute(db);
  const deleted = await deleteEnded(db, t, rows.rows, cutoff);
  // Rate rows belong to no item: each call takes a bounded share of the spent ones.
  await deleteSpentRateRows(db, t, opts);
  return deleted;
}

/** Where a filtered purge's scan of ix_created has got to (created_at as text with microseconds, and the id). */
export interface PurgePosition {
  key: string;
  id: string;
}

/**
 * The terminal items of one state (and type) of a queue that ended `olderThanMs` ago or more, as a range of ix_created.
 */
function filteredScope(f: PurgeFilter, cutoff: RawBuilder<unknown>): RawBuilder<unknown> {
  const type = f.type === undefined ? sql`` : sql` AND type = ${f.type}`;
  return sql`queue = ${f.queue} AND created_at < ${cutoff} AND ${TERMINAL_BEFORE(cutoff)} AND state = ${f.state}${
    type
  }`;
}

/**
 * Deletes up to `limit` items of the filter after `after` in creation
 * order (an operator's bulk purge, called until it returns no position);
 * returns how many went and where the next call goes on.
 */
export async function purgeFilteredBatch(
  db: LedgerDb,
  t: LedgerTables,
  f: PurgeFilter,
  after: PurgePosition | undefined,
  limit: number,
): Promise<{ purged: number; next: PurgePosition | undefined }> {
  const cutoff = nowPlusMs(-(f.olderThanMs ?? 0));
  const from =
    after === undefined
      ? sql``
      : sql` AND created_at >= ${after.key} AND (created_at > ${after.key} OR id > ${after.id})`;
  const rows = await sql<
    PurgeRow & { created_key: string }
  >`SELECT id, queue, lane, concurrency_key, DATE_FORMAT(created_at, '%Y-%m-%d %H:%i:%s.%f') AS created_key
    FROM ${t.items} WHERE ${filteredScope(f, cutoff)}${from} ORDER BY created_at, id LIMIT ${limit}`.execute(db);
  const last = rows.rows[rows.rows.length - 1];
  const purged = await deleteEnded(db, t, rows.rows, cutoff);
  return {
    purged,
    next: last === undefined || rows.rows.length < limit ? undefined : { key: String(last.created_key), id: last.id },
  };
}

/** How many items a filtered purge would delete now (its dry run). */
export async function countPurgeable(exec: Executor, t: LedgerTables, f: PurgeFilter): Promise<number> {
  const r = await sql<{
    n: number | string;
  }>`SELECT COUNT(*) AS n FROM ${t.items} WHERE ${filteredScope(f, nowPlusMs(-(f.olderThanMs ?? 0)))}`.execute(exec);
  return Number(r.rows[0]?.n ?? 0);
}

/**
 * Deletes these items (still ended before `cutoff`) with their history and steps, then their lanes' rows left empty.
 */
async function deleteEnded(
  db: LedgerDb,
  t: LedgerTables,
  rows: readonly PurgeRow[],
  cutoff: RawBuilder<unknown>,
): Promise<number> {
  if (rows.length === 0) return 0;
  const ids = rows.map((r) => r.id);
  const deleted = await db.transaction().execute(async (trx) => {
    await sql`DELETE FROM ${t.attempts} WHERE item_id IN (${list(ids)})`.execute(trx);
    await sql`DELETE FROM ${t.steps} WHERE item_id IN (${list(ids)})`.execute(trx);
    const d = await sql`DELETE FROM ${t.items} WHERE id IN (${list(ids)}) AND ${TERMINAL_BEFORE(cutoff)}`.execute(trx);
    return affected(d);
  });
  const lanes = [
    ...new Map(rows.filter((r) => r.lane !== null).map((r) => [queueScoped(r.queue, r.lane ?? ''), r])).values(),
  ];
  if (lanes.length > 0) {
    // A lane row may go once nothing of the lane is left; enqueue locks the
    // same row, so a concurrent enqueue either sees it gone or keeps it alive.
    await sql`DELETE FROM ${t.lanes} WHERE busy_from = 0
      AND ${laneIn(lanes)}
      AND NOT EXISTS (SELECT 1 FROM ${t.items} i WHERE i.queue = ${t.lanes}.queue AND i.lane = ${
        t.lanes
      }.lane)`.execute(db);
  }
  const keys = rows.flatMap((r) => (r.concurrency_key === null ? [] : [{ queue: r.queue, key: r.concurrency_key }]));
  if (keys.length > 0) await deleteIdleKeys(db, t, keys);
  return deleted;
}
