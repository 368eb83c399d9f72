import type { LedgerDb } from './connection.js';
import { newLeaseToken } from './ids.js';
import { finishFleetTask, readFleetTask, takeFleetTask } from './sql/fleet-tasks.js';
import { queueStats } from './sql/stats.js';
import type { LedgerTables } from './tables.js';
import type { QueueStats } from './types.js';

const STATS_TASK = 'stats';

export interface FleetStats {
  stats: QueueStats[];
  /** When they were counted (the ledger's clock), or null if never yet. */
  countedAt: Date | null;
  /** This call counted them. */
  countedHere: boolean;
}

/**
 * The ledger's depth by queue and state as the fleet last counted it
 * (docs/design.md §7, Gauges): when the count is older than `everyMs`,
 * the one replica whose CAS takes the task's lease counts again
 * (ledger.stats: bounded index ranges per queue) and records it; every
 * other replica reads the recorded count, one row. A holder that dies
 * mid-count leaves the lease to expire after `leaseMs`.
 */
export async function fleetStats(db: LedgerDb, t: LedgerTables, opts: { everyMs: number; leaseMs: number }): Promise<FleetStats> {
  const row = await readFleetTask(db, t, STATS_TASK);
  const looksDue = row === undefined || row.doneAt === null || Date.now() - row.doneAt.getTime() >= opts.everyMs / 2;
  if (looksDue) {
    const holder = newLeaseToken();
    if (await takeFleetTask(db, t, { name: STATS_TASK, holder, leaseMs: opts.leaseMs, everyMs: opts.everyMs })) {
      const stats = await queueStats(db, t);
      await finishFleetTask(db, t, { name: STATS_TASK, holder, result: JSON.stringify(stats) });
      return { stats, countedAt: new Date(), countedHere: true };
    }
  }
  return { stats: parseStats(row?.result ?? null), countedAt: row?.doneAt ?? null, countedHere: false };
}

function parseStats(json: string | null): QueueStats[] {
  if (json === null) return [];
  const value: unknown = JSON.parse(json);
  return Array.isArray(value) ? (value as QueueStats[]) : [];
}
