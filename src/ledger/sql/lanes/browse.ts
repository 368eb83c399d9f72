import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { SummaryRow } from '../../rows.js';
import type { LedgerTables } from '../../tables.js';
import { QUEUE_CLASSES, type ItemState } from '../../types.js';
import type { LaneSummary } from '../../operator-types.js';
import { inline, list, SUMMARY_COLUMNS } from '../common/fragments.js';

/** How many unfinished heads of a queue the lane list reads at most (one range of ix_claim). */
export const LANE_HEADS_READ = 10_000;

/**
 * The lanes of `queue` whose head has not ended, longest waiting first
 * (earliest due head): among the first 10,000 unfinished heads of the queue
 * in ix_claim order, so the read is one bounded index range whatever the
 * queue holds. A lane's pending count is its lane row's last sequence less
 * its head's, plus one (no count of its items).
 */
export async function browseLanes(
  exec: Executor,
  t: LedgerTables,
  queue: string,
  limit: number,
): Promise<LaneSummary[]> {
  // The heads' ids from the index alone (a range of ix_claim), then their rows by primary key.
  const heads = sql`SELECT i.id, i.lane, i.lane_seq, i.state, i.run_after FROM (SELECT id AS w FROM ${t.items}
    WHERE queue = ${queue} AND queue_class IN (${list(
      QUEUE_CLASSES,
    )}) AND state IN ('pending', 'processing', 'blocked') AND is_head = 1
    LIMIT ${inline(LANE_HEADS_READ)}) h JOIN ${t.items} i ON i.id = h.w`;
  const r = await sql<{
    lane: string;
    id: string;
    state: string;
    waiting_us: number | string | null;
    pending: number | string | null;
  }>`
    SELECT h.lane, h.id, h.state, TIMESTAMPDIFF(MICROSECOND, h.run_after, NOW(6)) AS waiting_us,
      l.next_seq - h.lane_seq + 1 AS pending
    FROM (SELECT a.* FROM (${heads}) a WHERE a.lane IS NOT NULL ORDER BY a.run_after, a.id LIMIT ${limit}) h
    JOIN ${t.lanes} l ON l.queue = ${queue} AND l.lane = h.lane
    ORDER BY h.run_after, h.id`.execute(exec);
  return r.rows.map((row) => ({
    lane: row.lane,
    headId: row.id,
    headState: row.state as ItemState,
    waitingMs: Math.max(0, Number(row.waiting_us ?? 0) / 1000),
    pending: Math.max(1, Number(row.pending ?? 1)),
  }));
}

/** One lane's items in lane order from after sequence `afterSeq`, `limit` at most (one range of ix_lane). */
export async function browseLaneItems(
  exec: Executor,
  t: LedgerTables,
  spec: { queue: string; lane: string; afterSeq: number | undefined; limit: number },
): Promise<{ rows: SummaryRow[]; next: number | null }> {
  const from = spec.afterSeq === undefined ? sql`` : sql` AND i.lane_seq > ${spec.afterSeq}`;
  const r = await sql<SummaryRow>`SELECT ${SUMMARY_COLUMNS} FROM ${t.items} i
    WHERE i.queue = ${spec.queue} AND i.lane = ${spec.lane}${from} ORDER BY i.lane_seq LIMIT ${spec.limit + 1}`.execute(
    exec,
  );
  if (r.rows.length <= spec.limit) return { rows: r.rows, next: null };
  const rows = r.rows.slice(0, spec.limit);
  return { rows, next: Number(rows[rows.length - 1]?.lane_seq ?? 0) };
}

/** The most members of a coalesced group shown. */
export const GROUP_READ = 1_000;

/**
 * The coalesced group item `id` was last claimed in, its head first: the
 * head is the item's group_head (or the item itself); the members follow it
 * in its lane, so they are found in the lane's range of ix_lane from the
 * head on (the next 1,000 entries at most).
 */
export async function groupMembers(exec: Executor, t: LedgerTables, id: string): Promise<string[]> {
  const r = await sql<{ id: string }>`SELECT m.id FROM ${t.items} x
    JOIN ${t.items} h ON h.id = COALESCE(x.group_head, x.id)
    JOIN ${t.items} m
      ON m.queue = h.queue AND m.lane = h.lane AND m.lane_seq >= h.lane_seq AND m.lane_seq < h.lane_seq + ${inline(
        GROUP_READ,
      )}
    WHERE x.id = ${id} AND h.lane IS NOT NULL AND (m.group_head = h.id OR m.id = h.id)
    ORDER BY m.lane_seq`.execute(exec);
  return r.rows.length > 1 ? r.rows.map((row) => row.id) : [];
}
