import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { QUEUE_CLASSES } from '../../types.js';
import type { SweepSignal } from '../../upkeep-types.js';
import { inline, list } from '../common/fragments.js';

/**
 * What a sweep of each queue would find, in one statement for all of them:
 * whether a due head is pending (a claim would find work), a lease has
 * expired, or a dependency probe is due, and whether the queue is paused or stale-only
 * (its consumers learn it here when Redis is down) or fair. Each is one EXISTS probe of an index
 * range per queue (ix_claim; the waits' ix_probe), the flags one lookup of the queue's row, so a process serving
 * hundreds of idle queues sweeps them with one round trip and no claim.
 */
export async function sweepSignals(exec: Executor, t: LedgerTables, queues: readonly string[]): Promise<SweepSignal[]> {
  if (queues.length === 0) return [];
  const classes = list(QUEUE_CLASSES);
  const derived = sql.join(
    // ASCII text, as the queue columns are: TiDB refuses to compare a derived table's utf8mb4 text with them.
    queues.map((q, i) => (i === 0 ? sql`SELECT _ascii${inline(q)} AS queue` : sql`SELECT _ascii${inline(q)}`)),
    sql` UNION ALL `,
  );
  const r = await sql<{
    queue: string;
    claimable: number | string;
    expired: number | string;
    probes: number | string;
    paused: number | string;
    fair: number | string;
    stale_only: number | string;
  }>`SELECT q.queue,
      EXISTS (SELECT 1 FROM ${t.items} i WHERE i.queue = q.queue AND i.queue_class IN (${classes})
        AND i.state = 'pending' AND i.is_head = 1 AND i.run_after <= NOW(6)) AS claimable,
      EXISTS (SELECT 1 FROM ${t.items} i WHERE i.queue = q.queue AND i.queue_class IN (${classes})
        AND i.state = 'processing' AND i.lease_until < NOW(6)) AS expired,
      EXISTS (SELECT 1 FROM ${t.waits} w WHERE w.queue = q.queue AND w.probe_after <= NOW(6)) AS probes,
      COALESCE(pq.paused, 0) AS paused,
      COALESCE(pq.fair, 0) AS fair,
      COALESCE(pq.stale_only, 0) AS stale_only
    FROM (${derived}) AS q LEFT JOIN ${t.queues} pq ON pq.queue = q.queue`.execute(exec);
  const signals = new Map(
    r.rows.map((row) => [
      row.queue,
      {
        queue: row.queue,
        claimable: Number(row.claimable) === 1,
        expiredLeases: Number(row.expired) === 1,
        dueProbes: Number(row.probes) === 1,
        paused: Number(row.paused) === 1,
        fair: Number(row.fair) === 1,
        staleOnly: Number(row.stale_only) === 1,
      },
    ]),
  );
  // In the order asked: a join may return its rows in another.
  return queues.flatMap((q) => signals.get(q) ?? []);
}
