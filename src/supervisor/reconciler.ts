import { reconcilePassChannel, type ReconcilePassMessage } from '../diagnostics.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log.js';
import { Maintainer, type MaintenancePass } from '../maintenance/maintainer.js';
import type { WakeChannel } from '../wake/wake-channel.js';

export interface ReconcilerOptions {
  ledger: Ledger;
  wake?: WakeChannel | undefined;
  /** The queues to keep, or a function read at each pass (a worker's matched queues change). */
  queues: readonly string[] | (() => readonly string[]);
  intervalMs: number;
  /** 0 = keep terminal items forever. */
  retentionMs: number;
  log: Logger;
  /** Called after each pass (gauges). */
  afterPass?: () => Promise<void>;
}

/** How often a pass also records waits missing for blocked items (see Ledger.repairWaits). */
const REPAIR_WAITS_EVERY_MS = 3_600_000;

/**
 * The supervisor's periodic housekeeping (docs/design/supervisor.md): a maintenance
 * pass (src/maintenance) over every configured queue each `intervalMs` —
 * expired leases back to pending (or dead), dependency probes and expiry,
 * waits repaired hourly, retention purge, stream trimming — then the gauges.
 * Every step is a CAS or idempotent, so any number of processes may run it at once.
 */
export class Reconciler {
  private readonly maintainer: Maintainer;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly options: ReconcilerOptions) {
    this.maintainer = new Maintainer({
      ledger: options.ledger,
      wake: options.wake,
      queues: options.queues,
      log: options.log,
      retentionMs: options.retentionMs,
      repairWaitsEveryMs: REPAIR_WAITS_EVERY_MS,
      trimStreams: true,
      forgetWakeMarks: true,
    });
  }

  start(): void {
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }

  /** One pass now (also used by tests): a queue's failure is logged, and the next pass retries it. */
  async pass(): Promise<MaintenancePass> {
    const { log } = this.options;
    const r = await this.maintainer.pass();
    for (const f of r.failed)
      log.warn({ queue: f.queue, err: f.error.message }, 'reconcile pass failed; next pass retries');
    await this.options
      .afterPass?.()
      .catch((error: unknown) => log.warn({ err: (error as Error).message }, 'gauge refresh failed'));
    return r;
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    const dueAtMs = Date.now() + delayMs;
    this.timer = setTimeout(() => {
      const startedAtMs = Date.now();
      this.running = this.pass()
        .then((r) => {
          if (reconcilePassChannel.hasSubscribers)
            reconcilePassChannel.publish(passMessage(r, this.options.intervalMs, dueAtMs, startedAtMs));
        })
        .finally(() => {
          this.running = undefined;
          this.schedule(this.options.intervalMs);
        });
    }, delayMs);
    this.timer.unref();
  }
}

/** A timed pass as the diagnostics channel carries it. */
function passMessage(
  r: MaintenancePass,
  intervalMs: number,
  dueAtMs: number,
  startedAtMs: number,
): ReconcilePassMessage {
  return {
    intervalMs,
    dueAtMs,
    startedAtMs,
    lookedAtMs: r.lookedAtMs,
    endedAtMs: Date.now(),
    queues: r.done.map((q) => ({
      queue: q.queue,
      reclaimStartedAtMs: q.reclaimStartedAtMs,
      reclaimed: q.reclaimed,
      reclaimedAtMs: q.reclaimedAtMs,
      ended: [...q.leaseExpiredDead, ...q.cancelled],
    })),
    failed: r.failed.map((f) => f.queue),
  };
}
