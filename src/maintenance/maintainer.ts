/**
 * The maintenance pass: the ledger's housekeeping steps for a set of queues. Fleet-wide it is the reconciler's
 * (src/supervisor/reconciler.ts, every queue a worker serves); a consumer's sweep runs it for its own queue, and
 * when is the sweeper's call (src/consumer/sweeper.ts). Not to be confused with the sweep itself.
 */
import type { Ledger } from '../ledger/ledger.js';
import type { ProbeOutcome, ReclaimOutcome, SweepSignal } from '../ledger/upkeep-types.js';
import type { Logger } from '../log.js';
import type { WakeChannel } from '../wake/wake-channel.js';

/** What a maintenance pass asks of the ledger. */
export type MaintenanceLedger = Pick<
  Ledger,
  'sweepSignals' | 'reclaimExpired' | 'probeDependencyWaits' | 'repairWaits' | 'purge' | 'forgetWakeMarks'
>;

/** What a maintenance pass asks of the wake channel: wake-ups for what it freed, and stream trimming. */
export type MaintenanceWake = Pick<WakeChannel, 'publish' | 'usable' | 'streamsOf' | 'redis'>;

export interface MaintainerOptions {
  ledger: MaintenanceLedger;
  /** Without one, what a pass frees is found by the consumers' next claim or sweep. */
  wake?: MaintenanceWake | undefined;
  /** The queues, or a function giving them at each pass. */
  queues: readonly string[] | (() => readonly string[]);
  log: Logger;
  /** Most expired leases reclaimed, and most due probes released, per queue and pass. */
  batchSize?: number;
  /** Terminal items older than this (ms) are purged; 0 = keep them forever. */
  retentionMs?: number;
  /** Most terminal items purged per queue and pass. */
  purgeBatchSize?: number;
  /**
   * How often (ms) a pass also records the dependency waits missing for
   * blocked items (see Ledger.repairWaits), the first pass included; 0 = never.
   */
  repairWaitsEveryMs?: number;
  /** Trim each queue's wake streams (XTRIM to the channel's cap) every pass. */
  trimStreams?: boolean;
  /** Forget old dependency wake marks once per pass (they belong to no queue). */
  forgetWakeMarks?: boolean;
}

/** What one pass did to one queue. */
export interface QueueMaintenance {
  queue: string;
  /** Expired leases back to pending: published as a `reclaim` wake-up. */
  reclaimed: string[];
  /**
   * When the reclaim step looked for expired leases, and when what it put back to pending was announced (ms since the
   * epoch); undefined if it did not run, or put nothing back.
   */
  reclaimStartedAtMs: number | undefined;
  reclaimedAtMs: number | undefined;
  /** Expired leases whose budget was spent: dead, class `lease_expired`. */
  leaseExpiredDead: string[];
  /** Expired leases of items whose cancel was requested: cancelled. */
  cancelled: string[];
  /** Due dependency probes back to pending: published as a `dependency` wake-up. */
  probed: string[];
  /** Of `probed`, those past their maxWait (their last run). */
  dependencyExpired: string[];
  purged: number;
  repairedWaits: number;
}

export interface MaintenancePass {
  /** When the pass had read which queues have work (ms since the epoch): what expired later waits for the next pass. */
  lookedAtMs: number;
  /** The queues whose pass went through, in order. */
  done: QueueMaintenance[];
  /** The queues whose pass failed (the others ran regardless). */
  failed: { queue: string; error: Error }[];
}

/**
 * Most queues one pass purges and trims. Past it they take turns, so a pass over thousands of idle queues costs a
 * bounded number of statements and Redis commands; retention is measured in hours or days, a turn in passes.
 */
export const TIDY_QUEUES_PER_PASS = 64;

const nothingReclaimed = (): ReclaimOutcome => ({ reclaimed: [], dead: [], cancelled: [] });
const nothingProbed = (): ProbeOutcome => ({ probed: [], expired: [] });

export const MAINTENANCE_DEFAULTS = {
  batchSize: 1000,
  retentionMs: 0,
  purgeBatchSize: 5000,
  repairWaitsEveryMs: 0,
  trimStreams: false,
  forgetWakeMarks: false,
} as const;

/**
 * The ledger's housekeeping for a set of queues (docs/design/supervisor.md), one
 * pass at a time: expired leases back to pending (or dead, or cancelled),
 * due dependency probes released, optionally waits repaired, terminal items
 * purged and wake streams trimmed; what went back to pending is announced
 * with a wake-up, so a consumer claims it now rather than at its next sweep.
 * Every step is a CAS or idempotent, so any number of processes may run it
 * at once; a queue whose pass fails does not stop the others.
 *
 * Who runs it chooses when: the supervisor's reconciler every
 * `reconcileIntervalMs` for all its queues, a consumer with `maintenance` on
 * from each of its sweeps for its own queue. Model: River's JobRescuer.
 */
export class Maintainer {
  private readonly settings: Required<Omit<MaintainerOptions, 'wake'>>;
  private lastWaitsRepairAt = Number.NEGATIVE_INFINITY;
  /** Where the next pass's turn of purging and trimming begins, when there are more queues than one pass tidies. */
  private tidyFrom = 0;

  constructor(private readonly options: MaintainerOptions) {
    this.settings = {
      ledger: options.ledger,
      queues: options.queues,
      log: options.log,
      batchSize: options.batchSize ?? MAINTENANCE_DEFAULTS.batchSize,
      retentionMs: options.retentionMs ?? MAINTENANCE_DEFAULTS.retentionMs,
      purgeBatchSize: options.purgeBatchSize ?? MAINTENANCE_DEFAULTS.purgeBatchSize,
      repairWaitsEveryMs: options.repairWaitsEveryMs ?? MAINTENANCE_DEFAULTS.repairWaitsEveryMs,
      trimStreams: options.trimStreams ?? MAINTENANCE_DEFAULTS.trimStreams,
      forgetWakeMarks: options.forgetWakeMarks ?? MAINTENANCE_DEFAULTS.forgetWakeMarks,
    };
  }

  /**
   * One pass over every queue now. Never throws: a queue's failure is in
   * `failed`. It first asks the ledger, in one statement for all the queues,
   * which have expired leases or due probes (or takes `signals` a caller just
   * read), and runs those steps only there: an idle queue costs nothing more.
   */
  async pass(signals?: ReadonlyMap<string, SweepSignal>): Promise<MaintenancePass> {
    const { repairWaitsEveryMs } = this.settings;
    const queues = typeof this.settings.queues === 'function' ? this.settings.queues() : this.settings.queues;
    const repairWaits = repairWaitsEveryMs > 0 && Date.now() - this.lastWaitsRepairAt >= repairWaitsEveryMs;
    const result: MaintenancePass = { lookedAtMs: 0, done: [], failed: [] };
    // Without signals (the read failed: one bad queue name fails it for all) every step runs, queue by queue as before.
    const found =
      signals ??
      (await this.settings.ledger.sweepSignals(queues).then(
        (list) => new Map(list.map((x) => [x.queue, x])),
        () => new Map<string, SweepSignal>(),
      ));
    result.lookedAtMs = Date.now();
    const tidy = this.tidyTurn(queues);
    for (const queue of queues) {
      try {
        result.done.push(await this.passQueue(queue, repairWaits, found.get(queue), tidy.has(queue)));
      } catch (error) {
        result.failed.push({ queue, error: error instanceof Error ? error : new Error(String(error)) });
      }
    }
    if (repairWaits) this.lastWaitsRepairAt = Date.now();
    if (this.settings.forgetWakeMarks) {
      await this.settings.ledger.forgetWakeMarks().catch((error: unknown) => {
        this.settings.log.warn(
          { err: (error as Error).message },
          'forgetting old dependency wake marks failed; the next pass retries',
        );
      });
    }
    return result;
  }

  /** The queues this pass purges and trims: all of them, or the next TIDY_QUEUES_PER_PASS in turn. */
  private tidyTurn(queues: readonly string[]): Set<string> {
    if (queues.length <= TIDY_QUEUES_PER_PASS) return new Set(queues);
    const from = this.tidyFrom % queues.length;
    this.tidyFrom = from + TIDY_QUEUES_PER_PASS;
    const turn = queues.slice(from, from + TIDY_QUEUES_PER_PASS);
    return new Set(turn.concat(queues.slice(0, TIDY_QUEUES_PER_PASS - turn.length)));
  }

  private async passQueue(
    queue: string,
    repairWaits: boolean,
    signal: SweepSignal | undefined,
    tidy: boolean,
  ): Promise<QueueMaintenance> {
    const { ledger, log, batchSize, retentionMs, purgeBatchSize, trimStreams } = this.settings;
    const wake = this.options.wake;
    let repairedWaits = 0;
    if (repairWaits) {
      // Blocked items written by a process on code from before schema 3 have no
      // waits row: recorded here, so their waits can end.
      repairedWaits = await ledger.repairWaits(queue);
      if (repairedWaits > 0) {
        log.warn(
          { queue, repaired: repairedWaits },
          'recorded dependency waits missing for blocked items (blocked by code older than schema 3?)',
        );
      }
    }
    const reclaimStartedAtMs = signal?.expiredLeases !== false ? Date.now() : undefined;
    const r =
      reclaimStartedAtMs !== undefined ? await ledger.reclaimExpired({ queue, limit: batchSize }) : nothingReclaimed();
    // Announced at once, not after the rest of the pass: a dead holder's items are claimable now.
    // (Publishing fails soft, counted and logged by the channel: the ledger already holds the change.)
    if (wake && r.reclaimed.length > 0)
      await wake.publish([{ queue, queueClass: 'default', kind: 'reclaim', ids: r.reclaimed }]);
    const reclaimedAtMs = r.reclaimed.length > 0 ? Date.now() : undefined;
    const p =
      signal?.dueProbes !== false || repairedWaits > 0
        ? await ledger.probeDependencyWaits({ queue, limit: batchSize })
        : nothingProbed();
    const purged =
      tidy && retentionMs > 0 ? await ledger.purge({ queue, olderThanMs: retentionMs, limit: purgeBatchSize }) : 0;
    if (tidy && trimStreams && wake && (await wake.usable())) await wake.streamsOf(queue).trim(wake.redis);
    const done: QueueMaintenance = {
      queue,
      reclaimed: r.reclaimed,
      reclaimStartedAtMs,
      reclaimedAtMs,
      leaseExpiredDead: r.dead,
      cancelled: r.cancelled,
      probed: p.probed.map((x) => x.id),
      dependencyExpired: p.expired,
      purged,
      repairedWaits,
    };
    if (
      done.reclaimed.length +
        done.leaseExpiredDead.length +
        done.cancelled.length +
        done.probed.length +
        done.dependencyExpired.length +
        purged >
      0
    ) {
      log.info(
        {
          queue,
          reclaimed: done.reclaimed.length,
          leaseExpiredDead: done.leaseExpiredDead.length,
          cancelled: done.cancelled.length,
          probed: done.probed.length,
          dependencyExpired: done.dependencyExpired.length,
          purged,
        },
        'reconciled',
      );
    }
    if (wake && done.probed.length > 0)
      await wake.publish([{ queue, queueClass: 'default', kind: 'dependency', ids: done.probed }]);
    return done;
  }
}
