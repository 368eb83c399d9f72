import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log.js';
import type { WakeChannel } from '../wake/wake-channel.js';

export interface ReconcilerOptions {
  ledger: Ledger;
  wake?: WakeChannel | undefined;
  queues: readonly string[];
  intervalMs: number;
  /** 0 = keep terminal items forever. */
  retentionMs: number;
  log: Logger;
  /** Called after each pass (gauges). */
  afterPass?: () => Promise<void>;
}

/**
 * The supervisor's periodic housekeeping (docs/design.md §7): expired leases back to
 * pending (or dead), dependency probes and expiry, retention purge, stream
 * trimming, gauges. Every step is a CAS or idempotent, so any number of
 * processes may run it at once.
 */
/** How often a pass also records waits missing for blocked items (see Ledger.repairWaits). */
const REPAIR_WAITS_EVERY_MS = 3_600_000;

export class Reconciler {
  private timer: NodeJS.Timeout | undefined;
  private lastWaitsRepairAt = Number.NEGATIVE_INFINITY;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly options: ReconcilerOptions) {}

  start(): void {
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  /** One pass now (also used by tests). */
  async pass(): Promise<void> {
    const { ledger, wake, queues, retentionMs, log } = this.options;
    // Blocked items written by a process on code from before schema 3 have no
    // waits row: record them at start and hourly, so their waits can end.
    const repairWaits = Date.now() - this.lastWaitsRepairAt >= REPAIR_WAITS_EVERY_MS;
    for (const queue of queues) {
      try {
        if (repairWaits) {
          const repaired = await ledger.repairWaits(queue);
          if (repaired > 0) log.warn({ queue, repaired }, 'recorded dependency waits missing for blocked items (blocked by code older than schema 3?)');
        }
        const r = await ledger.reclaimExpired({ queue, limit: 1000 });
        const p = await ledger.probeDependencyWaits({ queue, limit: 1000 });
        const purged = retentionMs > 0 ? await ledger.purge({ queue, olderThanMs: retentionMs, limit: 5000 }) : 0;
        if (wake && (await wake.usable())) await wake.streamsOf(queue).trim(wake.redis);
        if (r.reclaimed.length + r.dead.length + r.cancelled.length + p.probed.length + p.expired.length + purged > 0) {
          log.info(
            { queue, reclaimed: r.reclaimed.length, leaseExpiredDead: r.dead.length, cancelled: r.cancelled.length, probed: p.probed.length, dependencyExpired: p.expired.length, purged },
            'reconciled',
          );
        }
        if (wake && r.reclaimed.length > 0) await wake.publish([{ queue, queueClass: 'default', kind: 'reclaim', ids: r.reclaimed }]);
        if (wake && p.probed.length > 0) {
          await wake.publish([{ queue, queueClass: 'default', kind: 'dependency', ids: p.probed.map((x) => x.id) }]);
        }
      } catch (error) {
        log.warn({ queue, err: (error as Error).message }, 'reconcile pass failed; next pass retries');
      }
    }
    if (repairWaits) this.lastWaitsRepairAt = Date.now();
    await this.options.afterPass?.().catch((error: unknown) => log.warn({ err: (error as Error).message }, 'gauge refresh failed'));
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.pass().finally(() => {
        this.running = undefined;
        this.schedule(this.options.intervalMs);
      });
    }, delayMs);
    this.timer.unref();
  }
}
