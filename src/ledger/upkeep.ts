import type { LedgerCore } from './core.js';
import { limitSchema, maintenanceSchema, purgeSchema, queueListSchema } from './inputs.js';
import { reclaimExpired } from './sql/upkeep/reclaim.js';
import { purgeTerminal } from './sql/upkeep/purge.js';
import { sweepSignals } from './sql/upkeep/sweep-signals.js';
import { probeDependencyWaits } from './sql/waits/dependency.js';
import { repairWaits } from './sql/waits/waits.js';
import { purgeWakeMarks } from './sql/waits/wake-marks.js';
import type { ProbeOutcome, ReclaimOutcome, SweepSignal } from './upkeep-types.js';
import { queueName, validate } from './validation.js';

/** Dependency wake marks are kept at least this long (see sql/waits/wake-marks.ts). */
const WAKE_MARK_KEEP_MS = 86_400_000;

/**
 * The maintenance a sweep or the reconciler runs: expired leases, dependency
 * probes, retention, wake marks.
 */
export class LedgerUpkeep {
  constructor(private readonly core: LedgerCore) {}

  reclaimExpired(opts: { queue?: string; limit?: number } = {}): Promise<ReclaimOutcome> {
    const v = validate(maintenanceSchema, opts, 'reclaimExpired');
    const { db, tables } = this.core;
    return this.core.capabilities().then((caps) => reclaimExpired(db, caps, tables, v));
  }

  /**
   * For each queue, whether a claim, reclaimExpired or probeDependencyWaits
   * would find work now: one statement however many queues, so idle queues
   * cost a sweep nothing more.
   */
  async sweepSignals(queues: readonly string[]): Promise<SweepSignal[]> {
    validate(queueListSchema, queues, 'sweepSignals', 'queues');
    return sweepSignals(this.core.db, this.core.tables, queues);
  }

  probeDependencyWaits(opts: { queue?: string; limit?: number } = {}): Promise<ProbeOutcome> {
    const v = validate(maintenanceSchema, opts, 'probeDependencyWaits');
    return probeDependencyWaits(this.core.db, this.core.tables, v);
  }

  /** Records the missing waits rows of a queue's blocked items (blocked before schema 3); returns how many. */
  repairWaits(queue: string): Promise<number> {
    validate(queueName, queue, 'repairWaits', 'queue');
    return repairWaits(this.core.db, this.core.tables, queue);
  }

  /** Deletes terminal items older than `olderThanMs` (and their history); returns how many. */
  purge(opts: { olderThanMs: number; limit?: number; queue?: string }): Promise<number> {
    const v = validate(purgeSchema, opts, 'purge');
    return purgeTerminal(this.core.db, this.core.tables, v);
  }

  /**
   * Forgets dependency wake marks untouched for a day (at most `limit`; see
   * sql/waits/wake-marks.ts). They belong to no queue: one call per maintenance
   * pass, whatever the item retention.
   */
  forgetWakeMarks(limit = 1000): Promise<number> {
    validate(limitSchema, limit, 'forgetWakeMarks', 'limit');
    return purgeWakeMarks(this.core.db, this.core.tables, WAKE_MARK_KEEP_MS, limit);
  }
}
