import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { ITEM_STATES, QUEUE_CLASSES, type BoundedCount, type ItemState, type QueueStats } from '../../types.js';
import { countUpTo } from '../../bounded-count.js';
import { inline, list } from '../common/fragments.js';

/**
 * The most items counted per queue and state: a count reads one bounded
 * range of ix_claim, never the whole table, so stats and gauges cost the
 * same however many items the ledger holds. Work not yet done (pending,
 * processing, blocked) is counted up to 100,000; history (terminal states,
 * which grow with retention and which the outcome counters already track)
 * up to 10,000. A state with more reads as its cap, marked `atLeast`.
 */
export function statsCountCap(state: ItemState): number {
  return state === 'pending' || state === 'processing' || state === 'blocked' ? 100_000 : 10_000;
}

/**
 * Depth by state and the oldest due age, per queue: the queues are found by
 * seeking ix_claim from one queue name to the next (one index seek per
 * queue), then each queue's counts are bounded index ranges.
 * No GROUP BY over the table, on any server: O(queues), not O(items).
 */
export async function queueStats(db: LedgerDb, t: LedgerTables, queue?: string): Promise<QueueStats[]> {
  const queues = queue === undefined ? await listQueues(db, t) : [queue];
  const out: QueueStats[] = [];
  for (const q of queues) {
    const s = await statsOfQueue(db, t, q);
    if (s) out.push(s);
  }
  return out;
}

/**
 * Every queue that has items, in order: one index seek each, from one queue
 * name to the next (TiDB has no recursive CTE that could do it in one
 * statement: it refuses aggregates and LIMIT in the recursive part).
 */
export async function listQueues(exec: Executor, t: LedgerTables): Promise<string[]> {
  const out: string[] = [];
  for (let after = ''; ; ) {
    const r = await sql<{
      queue: string | null;
    }>`SELECT MIN(queue) AS queue FROM ${t.items} WHERE queue > ${after}`.execute(exec);
    const next = r.rows[0]?.queue;
    if (next === null || next === undefined) return out;
    out.push(String(next));
    after = String(next);
  }
}

/**
 * One queue's counts (each a bounded range of ix_claim) and oldest due head, in one statement; undefined when it has no
 * items.
 */
async function statsOfQueue(exec: Executor, t: LedgerTables, queue: string): Promise<QueueStats | undefined> {
  const classes = list(QUEUE_CLASSES);
  const count = (state: ItemState): RawBuilder<unknown> =>
    sql`(SELECT COUNT(*) FROM (SELECT 1 AS one FROM ${t.items} WHERE queue = ${inline(queue)} AND queue_class IN (${
      classes
    })
      AND state = ${inline(state)} LIMIT ${inline(statsCountCap(state))}) AS c)`;
  // The oldest due head among the first 100,000 due heads in claim order: exact unless the queue has more.
  const oldest = sql`(SELECT TIMESTAMPDIFF(MICROSECOND, MIN(run_after), NOW(6)) FROM (SELECT run_after FROM ${t.items}
      WHERE queue = ${inline(queue)} AND queue_class IN (${
        classes
      }) AND state = 'pending' AND is_head = 1 AND run_after <= NOW(6)
      LIMIT ${inline(statsCountCap('pending'))}) AS d)`;
  // Pending items not due yet, among the first 100,000 pending: the same bounded range as the pending count.
  const scheduled = sql`(SELECT COUNT(*) FROM (SELECT 1 AS one FROM ${t.items} WHERE queue = ${inline(
    queue,
  )} AND queue_class IN (${classes})
      AND state = 'pending' AND run_after > NOW(6) LIMIT ${inline(statsCountCap('pending'))}) AS s)`;
  const columns = ITEM_STATES.map((state) => sql`${count(state)} AS ${sql.ref(state)}`);
  const r = await sql<
    Record<string, number | string | null>
  >`SELECT ${sql.join(columns)}, ${oldest} AS age_us, ${scheduled} AS scheduled`.execute(exec);
  const row = r.rows[0];
  if (!row) return undefined;
  const counts = Object.fromEntries(
    ITEM_STATES.map((state) => [state, countUpTo(Number(row[state] ?? 0), statsCountCap(state))]),
  ) as Record<ItemState, BoundedCount>;
  if (ITEM_STATES.every((state) => counts[state].count === 0)) return undefined;
  return {
    queue,
    counts,
    oldestDueAgeMs: Math.max(0, Number(row.age_us ?? 0) / 1000),
    scheduled: countUpTo(Number(row.scheduled ?? 0), statsCountCap('pending')),
  };
}

/** Items of `queue` being processed right now, fleet-wide (one index range per class). */
export async function countProcessing(db: LedgerDb, t: LedgerTables, queue: string): Promise<number> {
  const r = await processingCount(t, queue).execute(db);
  return Number(r.rows[0]?.n ?? 0);
}

/** The statement of countProcessing, for a caller that sends it with another (sql/fleet/fleet-cap.ts). */
export function processingCount(t: LedgerTables, queue: string): RawBuilder<{ n: number | string }> {
  return sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${t.items}
    WHERE queue = ${inline(queue)} AND queue_class IN ('interactive', 'default', 'bulk') AND state = 'processing'`;
}
