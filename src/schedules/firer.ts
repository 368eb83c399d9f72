import type { Ledger } from '../ledger/ledger.js';
import { errno } from '../ledger/retry.js';
import type { DueSchedule } from '../ledger/schedules.js';
import { QueueDrainingError } from '../errors.js';
import type { Logger } from '../log.js';
import { Producer } from '../producer/producer.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import { importRedisSchedules } from './redis-import.js';

export interface ScheduleFirerOptions {
  ledger: Ledger;
  /**
   * Wake-ups for the fires' items, and the old schedules in Redis to import; without it consumers find
   * the items at their sweep.
   */
  wake?: WakeChannel | undefined;
  log: Logger;
  /**
   * The longest this firer goes without looking at the ledger (ms): how late a fire made elsewhere, or a
   * resumed schedule, can be seen.
   */
  checkIntervalMs?: number;
  /**
   * This replica's clock is this far off the real one (ms): for tests that the ledger's clock,
   * not a replica's, decides.
   */
  clockOffsetMs?: number;
}

export interface ScheduleFirerCounters {
  /** Looks at the ledger. */
  passes: number;
  /** Items this firer's fires enqueued. */
  enqueued: number;
  /** Fires whose item was there already (an enqueue that came back a duplicate): none while the CAS holds. */
  duplicates: number;
  /** Due schedules another replica advanced first (its CAS won). */
  lost: number;
  /** Passes that failed (the next one tries again). */
  failures: number;
}

/** Wake a little after the earliest fire time, so the ledger's clock has surely passed it. */
const WAKE_MARGIN_MS = 2;
/** How soon to look again after every due schedule was another replica's. */
const LOST_RACE_WAIT_MS = 20;
export const DEFAULT_SCHEDULE_CHECK_MS = 1_000;
const ER_NO_SUCH_TABLE = 1146;

/**
 * Fires the ledger's due schedules (docs/design/wake.md, "Recurring schedules"):
 * each due schedule's next fire time is advanced by a CAS in the same
 * transaction that enqueues its fires' items, keyed `<name>:<fire time ms>`,
 * so however many replicas run a firer, each fire makes one item. Due is
 * decided on the ledger's clock (NOW(6)); this replica's clock only times
 * its next look: at the earliest next fire time, and at least every
 * `checkIntervalMs`. Redis plays no part in it beyond the wake-ups.
 */
export class ScheduleFirer {
  readonly counters: ScheduleFirerCounters = { passes: 0, enqueued: 0, duplicates: 0, lost: 0, failures: 0 };
  private readonly producer: Producer;
  private readonly checkIntervalMs: number;
  private running: Promise<void> | undefined;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private wakeUp: (() => void) | undefined;
  private failing = false;
  private importedFromRedis = false;
  private importing: Promise<void> | undefined;

  constructor(private readonly options: ScheduleFirerOptions) {
    this.producer = new Producer({ ledger: options.ledger, wake: options.wake });
    this.checkIntervalMs = options.checkIntervalMs ?? DEFAULT_SCHEDULE_CHECK_MS;
  }

  start(): void {
    if (this.running) return;
    this.running = this.loop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.wakeUp?.();
    await this.running;
    await this.importing;
  }

  /** This replica's clock. */
  private clock(): number {
    return Date.now() + (this.options.clockOffsetMs ?? 0);
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      let waitMs = this.checkIntervalMs;
      try {
        waitMs = await this.pass();
        if (this.failing) this.options.log.info('schedule firing works again');
        this.failing = false;
      } catch (error) {
        this.counters.failures++;
        // A ledger older than schema 12 has no schedules: nothing to fire, and nothing to say on every pass.
        if (errno(error) === ER_NO_SUCH_TABLE) return;
        if (!this.failing)
          this.options.log.warn({ err: (error as Error).message }, 'schedule firing failed; trying again every check');
        this.failing = true;
      }
      await this.sleep(waitMs);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.wakeUp = resolve;
      this.timer = setTimeout(resolve, ms);
      this.timer.unref();
    });
  }

  /** Fires what is due now; returns how long to wait before the next look (ms). */
  async pass(): Promise<number> {
    this.counters.passes++;
    this.importFromRedis();
    for (;;) {
      const { now, earliest } = await this.options.ledger.schedules.earliestFire();
      // The ledger's time as this replica's clock reads it, so the wait below is measured on the ledger's clock.
      const localAtLedgerNow = this.clock();
      if (earliest === null) return this.checkIntervalMs;
      if (earliest > now) {
        const wakeAtLocal = localAtLedgerNow + (earliest.getTime() - now.getTime()) + WAKE_MARGIN_MS;
        return Math.max(0, Math.min(this.checkIntervalMs, wakeAtLocal - this.clock()));
      }
      const { due } = await this.options.ledger.schedules.due();
      let advanced = 0;
      for (const d of due) if (await this.fire(d)) advanced++;
      if (this.stopped) return 0;
      // Others advanced them first: look again shortly, for what they left due.
      if (advanced === 0) return LOST_RACE_WAIT_MS;
    }
  }

  /**
   * The schedules an older lanewake kept in Redis, imported once
   * (src/schedules/redis-import.ts), beside the passes: a Redis away at
   * start must not hold up the fires.
   */
  private importFromRedis(): void {
    const wake = this.options.wake;
    if (this.importedFromRedis || this.importing || !wake) return;
    this.importing = importRedisSchedules(this.options.ledger, wake, this.options.log)
      .then(
        (done) => {
          this.importedFromRedis = done;
        },
        (error: unknown) =>
          this.options.log.warn(
            { err: (error as Error).message },
            'importing the schedules kept in Redis failed; trying again',
          ),
      )
      .finally(() => {
        this.importing = undefined;
      });
  }

  /**
   * One due schedule's fires: advanced and enqueued in one transaction, or left to the replica that advanced it first.
   */
  private async fire(d: DueSchedule): Promise<boolean> {
    const results = await this.producer.transaction(this.options.ledger.db, async (tx) => {
      if (!(await this.options.ledger.schedules.advance(tx.trx, d))) return undefined;
      if (d.inputs.length === 0) return [];
      // A drain-only queue takes nothing new: its fires pass, so neither it nor the schedules after it stay due.
      return tx.enqueueMany(d.inputs).catch((error: unknown) => {
        if (!(error instanceof QueueDrainingError)) throw error;
        this.options.log.warn(
          { schedule: d.schedule.name, queue: error.queue },
          'schedule fire skipped: its queue is drain-only',
        );
        return [];
      });
    });
    if (results === undefined) {
      this.counters.lost++;
      return false;
    }
    const duplicates = results.filter((r) => r.duplicate).length;
    this.counters.enqueued += results.length - duplicates;
    this.counters.duplicates += duplicates;
    return true;
  }
}
