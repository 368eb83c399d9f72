import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import { ITEM_STATES, type ItemState, type QueueStats } from '../types.js';

export async function queueStats(db: LedgerDb, t: LedgerTables, queue?: string): Promise<QueueStats[]> {
  const filter = queue === undefined ? sql`` : sql`WHERE queue = ${queue}`;
  const counts = await sql<{ queue: string; state: string; n: number }>`
    SELECT queue, state, COUNT(*) AS n FROM ${t.items} ${filter} GROUP BY queue, state`.execute(db);
  const dueFilter = queue === undefined ? sql`` : sql`AND queue = ${queue}`;
  const ages = await sql<{ queue: string; age_us: number | null }>`
    SELECT queue, TIMESTAMPDIFF(MICROSECOND, MIN(run_after), NOW(6)) AS age_us FROM ${t.items}
    WHERE state = 'pending' AND is_head = 1 AND run_after <= NOW(6) ${dueFilter} GROUP BY queue`.execute(db);

  const byQueue = new Map<string, QueueStats>();
  const entry = (q: string): QueueStats => {
    let s = byQueue.get(q);
    if (!s) {
      s = { queue: q, counts: Object.fromEntries(ITEM_STATES.map((st) => [st, 0])) as Record<ItemState, number>, oldestDueAgeMs: 0 };
      byQueue.set(q, s);
    }
    return s;
  };
  for (const r of counts.rows) entry(r.queue).counts[r.state as ItemState] = Number(r.n);
  for (const r of ages.rows) entry(r.queue).oldestDueAgeMs = Math.max(0, Number(r.age_us ?? 0) / 1000);
  return [...byQueue.values()].sort((a, b) => (a.queue < b.queue ? -1 : 1));
}

/** Items of `queue` being processed right now, fleet-wide (one index range per class). */
export async function countProcessing(db: LedgerDb, t: LedgerTables, queue: string): Promise<number> {
  const r = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.items}
    WHERE queue = ${queue} AND queue_class IN ('interactive', 'default', 'bulk') AND state = 'processing'`.execute(db);
  return Number(r.rows[0]?.n ?? 0);
}
