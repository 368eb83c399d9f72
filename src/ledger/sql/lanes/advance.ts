import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../../connection.js';
import { tableText, type LedgerTables } from '../../tables.js';
import { INLINE, statementFor, type ValueWriter } from '../common/bound.js';
import { affected, inline } from '../common/fragments.js';

/**
 * A lane's head that has just ended (completed, dead, skipped, cancelled),
 * at `laneSeq`: its lane gets its next head here, or goes idle.
 *
 * The lane row (docs/design/work-item.md, "Other tables") is written only when the
 * lane changes between idle and busy: an enqueue always writes it (it
 * reserves sequences), a head's end only when it was the lane's last item.
 * A lane with work waiting hands on from item row to item row, and its
 * enqueues and completions never meet on a shared row.
 */
export interface EndedHead {
  queue: string;
  lane: string;
  laneSeq: number;
}

/** Each ended head's successor position, `lane_seq + 1` (sequences are gap free), as ranges on ix_lane. */
export function successorPlaces(heads: readonly EndedHead[]): RawBuilder<unknown> {
  return sql.raw(successorPlacesText(INLINE, heads));
}

function successorPlacesText(w: ValueWriter, heads: readonly EndedHead[]): string {
  return `(${heads
    .map((h) => `(queue = ${w.value(h.queue)} AND lane = ${w.value(h.lane)} AND lane_seq = ${w.value(h.laneSeq + 1)})`)
    .join(' OR ')})`;
}

/** The successors at `lane_seq + 1` that are pending become their lanes' heads. */
export function headSuccessors(t: LedgerTables, heads: readonly EndedHead[]): RawBuilder<unknown> {
  return sql.raw(headSuccessorsText(INLINE, t, heads));
}

function headSuccessorsText(w: ValueWriter, t: LedgerTables, heads: readonly EndedHead[]): string {
  return `UPDATE ${tableText(
    t,
    'items',
  )} FORCE INDEX (ix_lane) SET is_head = 1, updated_at = NOW(6) WHERE ${successorPlacesText(
    w,
    heads,
  )} AND state = 'pending'`;
}

/**
 * The lanes whose ended head was their last item go idle (`busy_from = 0`).
 * A lane row is matched only when its `next_seq` is that head's sequence,
 * so the update waits for an enqueue into the lane still in flight and,
 * once it committed, leaves the lane busy (the new item is the successor).
 * A lane that has an item at `lane_seq + 1` is left out by the derived
 * table before the lane row is read at all: TiDB locks a row a point read
 * finds even when the rest of the WHERE then refuses it, so a plain
 * `UPDATE … WHERE next_seq = …` would lock a busy lane's row against its
 * enqueues for the rest of the transaction. The successor test is one
 * correlated NOT EXISTS over the heads' constants, not one per head: TiDB
 * runs an uncorrelated subquery while it compiles the statement, and 128 of
 * them took 520 µs per item (docs/BENCHMARKS.md). ix_lane is named: MariaDB
 * otherwise probes each head through ix_created, reading the whole queue.
 * The queue is ASCII text, as the lane row's column (TiDB refuses to
 * compare a derived utf8mb4 text with it).
 */
export function idleLanes(t: LedgerTables, heads: readonly EndedHead[]): RawBuilder<unknown> {
  const rows = heads.map((h, i) => {
    const as = (name: string): RawBuilder<unknown> => sql.raw(i === 0 ? ` AS ${name}` : '');
    return sql`SELECT _ascii${inline(h.queue)}${as('queue')}, ${inline(h.lane)}${as('lane')}, ${inline(h.laneSeq)}${as(
      'seq',
    )}`;
  });
  return sql`UPDATE ${t.lanes} l JOIN (SELECT * FROM (${sql.join(rows, sql` UNION ALL `)}) AS h
      WHERE NOT EXISTS (SELECT 1 FROM ${t.items} n FORCE INDEX (ix_lane)
        WHERE n.queue = h.queue AND n.lane = h.lane AND n.lane_seq = h.seq + 1)
    ) AS v ON l.queue = v.queue AND l.lane = v.lane
    SET l.busy_from = 0 WHERE l.next_seq = v.seq`;
}

/**
 * One lane goes idle if its ended head was its last item: idleLanes as a
 * point update by the lane row's key (no derived table for TiDB to plan),
 * for a head whose lane row was just read to end with it.
 */
function idleLaneText(w: ValueWriter, t: LedgerTables, head: EndedHead): string {
  return `UPDATE ${tableText(t, 'lanes')} SET busy_from = 0 WHERE queue = ${w.value(head.queue)} AND lane = ${w.value(
    head.lane,
  )} AND next_seq = ${w.value(head.laneSeq)}`;
}

/**
 * One ended head's lane handed on. A plain read of the lane row (no lock)
 * says which way is likely: the head was the lane's last sequence, so the
 * lane goes idle (its row written once), or there is a successor at
 * `lane_seq + 1` to make the head (no lane row touched). Each write re-checks
 * what the read saw; when it no longer holds (an enqueue into the lane
 * committed meanwhile, or the successor was cancelled while it waited) the
 * lane is settled under its row's lock. The read is a point get, far cheaper
 * than the successor's update through ix_lane that an idle lane would find
 * nothing for. `prepared`: the three go prepared, for TiDB's plan cache
 * (sql/common/bound.ts). Returns whether the lane has a new head.
 */
export async function handOnLane(exec: Executor, t: LedgerTables, head: EndedHead, prepared = false): Promise<boolean> {
  const laneRead = statementFor(
    prepared,
    (w) =>
      `SELECT next_seq FROM ${tableText(t, 'lanes')} WHERE queue = ${w.value(head.queue)} AND lane = ${w.value(
        head.lane,
      )}`,
  );
  const row = await laneRead.$castTo<{ next_seq: number | string }>().execute(exec);
  const last = Number(row.rows[0]?.next_seq ?? head.laneSeq) === head.laneSeq;
  if (last && affected(await statementFor(prepared, (w) => idleLaneText(w, t, head)).execute(exec)) === 1) return false;
  if (!last && affected(await statementFor(prepared, (w) => headSuccessorsText(w, t, [head])).execute(exec)) === 1)
    return true;
  return advanceLocked(exec, t, head);
}

/**
 * The general case, under the lane row's lock (so no enqueue into the lane
 * runs meanwhile): the first unfinished item after the ended head becomes
 * the head, or the lane goes idle when nothing after it is left unfinished.
 * Items after the head are pending or cancelled, or processing as members of
 * a coalesced group whose head was taken back without them (an expired
 * group split by a reclaim's batch): such a member becomes the head, and
 * runs once its lease is reclaimed, so the lane never passes it by.
 * Returns whether the lane has a new head.
 *
 * Two statements to find and set the head on purpose: MariaDB runs `UPDATE
 * … ORDER BY … LIMIT 1` over a range by buffering every matching row first
 * (slow at the head of a long lane), and its optimizer prefers
 * ix_claim here, so the read names ix_lane.
 */
export async function advanceLocked(exec: Executor, t: LedgerTables, head: EndedHead): Promise<boolean> {
  await sql`SELECT next_seq FROM ${t.lanes} WHERE queue = ${head.queue} AND lane = ${head.lane} FOR UPDATE`.execute(
    exec,
  );
  for (;;) {
    const next = await sql<{ id: string }>`SELECT id FROM ${t.items} FORCE INDEX (ix_lane)
      WHERE queue = ${head.queue} AND lane = ${head.lane} AND lane_seq > ${
        head.laneSeq
      } AND state IN ('pending', 'processing')
      ORDER BY lane_seq LIMIT 1`.execute(exec);
    const id = next.rows[0]?.id;
    if (id === undefined) {
      await sql`UPDATE ${t.lanes} SET busy_from = 0 WHERE queue = ${head.queue} AND lane = ${head.lane}`.execute(exec);
      return false;
    }
    // An operator cancel of a waiting item takes no lane lock: if it won the race, look past it.
    const set = await sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6) WHERE id = ${
      id
    } AND state IN ('pending', 'processing')`.execute(exec);
    if (affected(set) === 1) return true;
  }
}
