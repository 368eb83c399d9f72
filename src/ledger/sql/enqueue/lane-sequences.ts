import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { byteOrder, laneIn, queueScoped } from '../common/fragments.js';
import type { NewItem } from './new-item.js';

/** An item's place in its lane, and whether it is the lane's head. */
export type LaneSequence = { seq: number; head: boolean };

export interface LaneCount {
  queue: string;
  lane: string;
  n: number;
}

/**
 * Per lane of the batch, how many of its items it carries; lanes sorted in
 * the order the lane rows' key is (the order a completion's UPDATE of
 * several lane rows locks them in), so enqueues and completions take lane
 * locks in one order.
 */
export function laneCounts(items: readonly NewItem[]): LaneCount[] {
  const counts = new Map<string, LaneCount>();
  for (const item of items) {
    if (item.lane === null) continue;
    const k = queueScoped(item.queue, item.lane);
    const c = counts.get(k);
    if (c) c.n++;
    else counts.set(k, { queue: item.queue, lane: item.lane, n: 1 });
  }
  return [...counts.values()].sort((a, b) =>
    a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : byteOrder(a.lane, b.lane),
  );
}

/**
 * Lane rows per upsert statement. On TiDB in pessimistic mode a statement
 * whose lock meets a newer commit on one of its keys runs again, whole: an
 * upsert of 1,000 lane rows while completions kept committing to those lanes
 * ran 20–33 times (4–7 s, the slow log's Exec_retry_count). A statement per
 * 32 lanes meets fewer commits and repeats less when it does; the statements
 * still travel in one round trip, in the same lane order.
 */
export const LANES_PER_UPSERT = 32;

/**
 * Reserves the batch's sequences on its lane rows (locking them), in
 * statements of LANES_PER_UPSERT lanes, then reads the rows back; no result
 * is needed between them. A lane that was idle (`busy_from = 0`) becomes
 * busy from the batch's first item of it, which is then its head. The new
 * counts come in as a derived table, so the update names them `v.…` rather
 * than VALUES(…), which MySQL 8.0.20+ deprecates and every server reads
 * alike. `busy_from` is assigned before `next_seq` and reads only the old
 * row: MySQL and MariaDB assign left to right, TiDB reads the old row in
 * every expression, and this means the same on all three.
 */
export function laneStatements(
  t: LedgerTables,
  lanes: readonly LaneCount[],
): { upserts: RawBuilder<unknown>[]; read: RawBuilder<unknown> } {
  const upserts: RawBuilder<unknown>[] = [];
  for (let i = 0; i < lanes.length; i += LANES_PER_UPSERT) {
    const rows = lanes
      .slice(i, i + LANES_PER_UPSERT)
      .map((l, k) =>
        k === 0
          ? sql`SELECT ${l.queue} AS queue, ${l.lane} AS lane, ${l.n} AS next_seq, 1 AS busy_from`
          : sql`SELECT ${l.queue}, ${l.lane}, ${l.n}, 1`,
      );
    upserts.push(sql`INSERT INTO ${t.lanes} (queue, lane, next_seq, busy_from)
    SELECT * FROM (${sql.join(rows, sql` UNION ALL `)}) AS v
    ON DUPLICATE KEY UPDATE busy_from = IF(${t.lanes}.busy_from = 0, ${t.lanes}.next_seq + 1, ${t.lanes}.busy_from),
      next_seq = ${t.lanes}.next_seq + v.next_seq`);
  }
  return { upserts, read: sql`SELECT queue, lane, next_seq, busy_from FROM ${t.lanes} WHERE ${laneIn(lanes)}` };
}

type LaneRow = { queue: string; lane: string; next_seq: number; busy_from: number };

/**
 * For every laned item, the next gap-free sequence of its lane and whether it
 * is the head: the item that made its lane busy. An item that is not its
 * lane's head loses any claim it was offered: it waits for its turn.
 */
function sequencesFrom(
  items: readonly NewItem[],
  lanes: readonly LaneCount[],
  rows: readonly LaneRow[],
): (LaneSequence | undefined)[] {
  const counts = new Map(lanes.map((l) => [queueScoped(l.queue, l.lane), l.n]));
  // Per lane: the next sequence of this batch, and the sequence that made the lane busy.
  const cursor = new Map<string, { next: number; busyFrom: number }>();
  for (const r of rows) {
    const n = counts.get(queueScoped(r.queue, r.lane));
    if (n === undefined) continue;
    cursor.set(queueScoped(r.queue, r.lane), { next: Number(r.next_seq) - n + 1, busyFrom: Number(r.busy_from) });
  }
  return items.map((item) => {
    if (item.lane === null) return undefined;
    const cur = cursor.get(queueScoped(item.queue, item.lane));
    if (!cur) throw new Error(`enqueue: lane row missing for ${item.queue}/${item.lane}`);
    const seq = cur.next++;
    const head = seq === cur.busyFrom;
    if (!head) delete item.claim;
    return { seq, head };
  });
}

export async function assignLaneSequences(
  exec: Executor,
  t: LedgerTables,
  items: readonly NewItem[],
): Promise<(LaneSequence | undefined)[]> {
  const lanes = laneCounts(items);
  if (lanes.length === 0) return items.map(() => undefined);
  const { upserts, read } = laneStatements(t, lanes);
  for (const upsert of upserts) await upsert.execute(exec);
  const rows = await read.$castTo<LaneRow>().execute(exec);
  return sequencesFrom(items, lanes, rows.rows);
}

export function nullableNumber(v: number | null): number | null {
  return v === null ? null : Number(v);
}
