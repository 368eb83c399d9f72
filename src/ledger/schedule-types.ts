import type { QueueClass } from './types.js';

/**
 * What each fire of a schedule enqueues: an item's fields, less its idempotency key and timing (the fire gives both).
 */
export interface ScheduleItem {
  queue: string;
  type: string;
  payload: unknown;
  lane?: string;
  queueClass?: QueueClass;
  concurrencyKey?: string;
  priority?: number;
  maxAttempts?: number;
}

/**
 * A recurring schedule (docs/design/wake.md, "Recurring schedules"): a cron
 * `pattern` in time zone `tz`, or an interval `everyMs`. Each fire enqueues
 * `item` with idempotency key `<name>:<fire time ms>`.
 */
export interface RecurringSchedule {
  /** Unique schedule name, 1-100 chars of [A-Za-z0-9._-]. */
  name: string;
  /** A cron pattern (5 fields, or 6 with seconds first) … */
  pattern?: string;
  /** … read in this IANA time zone (default UTC); only with `pattern`. */
  tz?: string;
  /** … or a fixed interval: fires at the multiples of `everyMs` since the Unix epoch. */
  everyMs?: number;
  item: ScheduleItem;
  /**
   * Fires missed while no worker ran: a fire less than a minute late runs;
   * older ones are skipped with 0 (default), and with more, every one of the
   * last `backfillMs` runs (as graphile-worker's `backfillPeriod`).
   */
  backfillMs?: number;
}

/**
 * Where a schedule was declared: the worker's config file (its `schedules:` section) or the API (`producer.schedule`,
 * an import of a schedule from Redis).
 */
export type ScheduleSource = 'config' | 'api';

/** A schedule as the ledger holds it. */
export interface ScheduleView {
  name: string;
  source: ScheduleSource;
  pattern: string | null;
  tz: string | null;
  everyMs: number | null;
  item: ScheduleItem;
  backfillMs: number;
  paused: boolean;
  /** The next fire time (on the ledger's clock). */
  nextFireAt: Date;
  /** The last fire's time, null before the first. */
  lastFireAt: Date | null;
  /** How many fires have been enqueued. */
  fires: number;
  createdAt: Date;
  updatedAt: Date;
}
