import type { LedgerDb } from './connection.js';
import { newLeaseToken } from './ids.js';
import {
  finishFleetTask,
  holdFleetLease,
  readFleetTask,
  releaseFleetLease,
  takeFleetTask,
} from './sql/fleet/fleet-tasks.js';
import { allPausedQueues } from './sql/queues/queue-settings.js';
import { countUpTo } from './bounded-count.js';
import { queueStats, statsCountCap } from './sql/operator/stats.js';
import type { LedgerTables } from './tables.js';
import { ITEM_STATES, type ItemState, type QueueStats } from './types.js';

const STATS_TASK = 'stats';
/** The standing lease of the replica that exports the fleet-wide gauges. */
const GAUGES_LEASE = 'gauges';

export interface FleetStats {
  stats: QueueStats[];
  /** When they were counted (the ledger's clock), or null if never yet. */
  countedAt: Date | null;
  /** This call counted them. */
  countedHere: boolean;
}

/**
 * The ledger's depth by queue and state as the fleet last counted it
 * (docs/design/supervisor.md, Gauges): when the count is older than `everyMs`,
 * the one replica whose CAS takes the task's lease counts again
 * (ledger.stats: bounded index ranges per queue) and records it; every
 * other replica reads the recorded count, one row. A holder that dies
 * mid-count leaves the lease to expire after `leaseMs`.
 */
export async function fleetStats(
  db: LedgerDb,
  t: LedgerTables,
  opts: { everyMs: number; leaseMs: number },
): Promise<FleetStats> {
  const row = await readFleetTask(db, t, STATS_TASK);
  const looksDue = row === undefined || row.doneAt === null || Date.now() - row.doneAt.getTime() >= opts.everyMs / 2;
  if (looksDue) {
    const holder = newLeaseToken();
    if (await takeFleetTask(db, t, { name: STATS_TASK, holder, leaseMs: opts.leaseMs, everyMs: opts.everyMs })) {
      const stats = await queueStats(db, t);
      await finishFleetTask(db, t, { name: STATS_TASK, holder, result: JSON.stringify(stats.map(toRecorded)) });
      return { stats, countedAt: new Date(), countedHere: true };
    }
  }
  return { stats: parseStats(row?.result ?? null), countedAt: row?.doneAt ?? null, countedHere: false };
}

/** What the exporter of the fleet-wide gauges publishes. */
export interface FleetGaugeReading extends FleetStats {
  /** Every queue the ledger holds paused. */
  paused: string[];
}

/**
 * The fleet-wide gauges for `holder`, if it holds (takes or keeps) the
 * gauges' standing lease for `leaseMs`: the fleet's last count (counted here
 * when due, as fleetStats) and the paused queues. Undefined when another
 * replica holds the lease: it exports them, this one exports none
 * (docs/design/supervisor.md, Gauges, once per fleet).
 */
export async function fleetGauges(
  db: LedgerDb,
  t: LedgerTables,
  opts: { holder: string; everyMs: number; leaseMs: number; countLeaseMs: number },
): Promise<FleetGaugeReading | undefined> {
  if (!(await holdFleetLease(db, t, { name: GAUGES_LEASE, holder: opts.holder, leaseMs: opts.leaseMs })))
    return undefined;
  const [stats, paused] = await Promise.all([
    fleetStats(db, t, { everyMs: opts.everyMs, leaseMs: opts.countLeaseMs }),
    allPausedQueues(db, t),
  ]);
  return { ...stats, paused };
}

/**
 * Gives up `holder`'s lease on the fleet-wide gauges (a stopping worker), so another replica takes them at its next
 * pass.
 */
export function releaseFleetGauges(db: LedgerDb, t: LedgerTables, holder: string): Promise<void> {
  return releaseFleetLease(db, t, { name: GAUGES_LEASE, holder });
}

/**
 * The count as the `stats` row records it: plain numbers and the states at
 * their cap, the shape every version of the worker reads and writes, so
 * replicas of two versions share the row during a rolling upgrade. Whether a
 * count is a floor follows from its cap (a range that reached it).
 */
interface RecordedStats {
  queue: string;
  counts: Record<ItemState, number>;
  capped: ItemState[];
  oldestDueAgeMs: number;
  scheduled: number;
}

function toRecorded(s: QueueStats): RecordedStats {
  const counts = Object.fromEntries(ITEM_STATES.map((state) => [state, s.counts[state].count])) as Record<
    ItemState,
    number
  >;
  return {
    queue: s.queue,
    counts,
    capped: ITEM_STATES.filter((state) => s.counts[state].atLeast),
    oldestDueAgeMs: s.oldestDueAgeMs,
    scheduled: s.scheduled.count,
  };
}

function fromRecorded(r: RecordedStats): QueueStats {
  const counts = Object.fromEntries(
    ITEM_STATES.map((state) => [state, countUpTo(Number(r.counts[state] ?? 0), statsCountCap(state))]),
  ) as QueueStats['counts'];
  return {
    queue: r.queue,
    counts,
    oldestDueAgeMs: Number(r.oldestDueAgeMs ?? 0),
    scheduled: countUpTo(Number(r.scheduled ?? 0), statsCountCap('pending')),
  };
}

function parseStats(json: string | null): QueueStats[] {
  if (json === null) return [];
  const value: unknown = JSON.parse(json);
  return Array.isArray(value) ? (value as RecordedStats[]).map(fromRecorded) : [];
}
