import { Queue, Worker, type ConnectionOptions, type Job } from 'bullmq';
import type { Cluster, RedisOptions } from 'ioredis';
import { clusterOf, createCluster, plainRedisOptions, type RedisTarget } from './redis.js';
import type { QueueClass } from '../ledger/types.js';

export interface WakeTimer {
  queue: string;
  queueClass: QueueClass;
  itemId: string;
  attempt: number;
  runAt: Date;
}

export interface RecurringSchedule {
  /** Unique schedule name; fires become items with idempotency key `<name>:<fire time ms>`. */
  name: string;
  /** A cron pattern, or … */
  pattern?: string;
  /** … a fixed interval. */
  everyMs?: number;
  /** What each fire enqueues. */
  item: { queue: string; type: string; payload: unknown; lane?: string; queueClass?: QueueClass };
}

/** A recurring schedule's fire: its item, under the fire's idempotency key `<schedule>:<fire time ms>`. */
export type ScheduledItem = RecurringSchedule['item'] & { idempotencyKey: string };

/**
 * Enqueues a schedule's fire (a Producer's enqueue, say): the one thing the
 * timer processor needs from above the wake layer, given by whoever starts it.
 */
export type ScheduledEnqueue = (item: ScheduledItem) => Promise<unknown>;

interface TimerJobData {
  queue: string;
  queueClass: QueueClass;
  itemId: string;
}

type ScheduleJobData = RecurringSchedule['item'] & { schedule: string };

export interface TimerHandlers {
  /** A delayed item is due: publish its wake-up. */
  onDue: (timer: TimerJobData) => Promise<void>;
  /** A recurring schedule fired at `fireTimeMs`: enqueue its item idempotently. */
  onScheduleFire: (schedule: string, item: RecurringSchedule['item'], fireTimeMs: number) => Promise<void>;
}

/** Fire a little after the due time, so the ledger's clock has surely passed it. */
const FIRE_MARGIN_MS = 5;

/**
 * How long a command of the scheduling side may go unanswered (a frozen Redis):
 * longer than the channel's own commands', since one addBulk of many timers is
 * a pipeline whose last script waits for all the others.
 */
const SCHEDULE_COMMAND_TIMEOUT_MS = 10_000;
/** How long close() waits for BullMQ to close gracefully before it cuts the connections. */
const CLOSE_WAIT_MS = 2_000;

/**
 * BullMQ carries future `runAfter`s and recurring schedules; its jobs only
 * ever publish a wake-up or enqueue through the ledger, never hold work.
 */
export class WakeTimers {
  private readonly queue: Queue;
  private worker: Worker | undefined;
  /** BullMQ's prefix: on a cluster a hash tag, since its scripts touch several keys of one queue at once. */
  private readonly prefix: string;
  /** Cluster clients made here (BullMQ leaves a client it was given open). */
  private readonly owned: Cluster[] = [];

  constructor(
    private readonly target: RedisTarget,
    private readonly name = 'lanewake-timers',
    prefix = 'lw',
  ) {
    const cluster = clusterOf(target);
    this.prefix = cluster ? `{${prefix}}` : prefix;
    // Fail fast while Redis is away: scheduling a timer is best effort, the sweep is the backstop.
    this.queue = new Queue(name, { connection: this.connection(false), prefix: this.prefix });
    this.queue.on('error', () => undefined);
  }

  /** `blocking`: the worker's connection, which BullMQ wants without a per-request retry cap. */
  private connection(blocking: boolean): ConnectionOptions {
    const cluster = clusterOf(this.target);
    if (!cluster) {
      const plain = plainRedisOptions(this.target as string | RedisOptions);
      return blocking ? { ...plain, maxRetriesPerRequest: null } : { ...plain, enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: SCHEDULE_COMMAND_TIMEOUT_MS };
    }
    const client = blocking
      ? createCluster(cluster, { clusterRetryStrategy: (t) => Math.min(1000, 50 * t) }, { maxRetriesPerRequest: null })
      : createCluster(cluster, { clusterRetryStrategy: (t) => Math.min(1000, 50 * t), enableOfflineQueue: false }, { maxRetriesPerRequest: 1, commandTimeout: SCHEDULE_COMMAND_TIMEOUT_MS });
    client.on('error', () => undefined);
    this.owned.push(client);
    return client;
  }

  /** One delayed job per (item, attempt): scheduling the same wake twice adds nothing. */
  async schedule(timers: readonly WakeTimer[], nowMs = Date.now()): Promise<void> {
    if (timers.length === 0) return;
    await this.queue.addBulk(
      timers.map((t) => ({
        name: 'wake',
        data: { queue: t.queue, queueClass: t.queueClass, itemId: t.itemId } satisfies TimerJobData,
        opts: {
          jobId: `${t.itemId}-${t.attempt}`,
          delay: Math.max(0, t.runAt.getTime() - nowMs + FIRE_MARGIN_MS),
          removeOnComplete: true,
          removeOnFail: 1000,
        },
      })),
    );
  }

  async upsertSchedule(s: RecurringSchedule): Promise<void> {
    await this.queue.upsertJobScheduler(
      s.name,
      s.pattern !== undefined ? { pattern: s.pattern } : { every: s.everyMs ?? 60_000 },
      { name: 'schedule', data: { ...s.item, schedule: s.name } satisfies ScheduleJobData, opts: { removeOnComplete: true, removeOnFail: 1000 } },
    );
  }

  async removeSchedule(name: string): Promise<void> {
    await this.queue.removeJobScheduler(name);
  }

  /** Whether start() has run in this process. */
  get started(): boolean {
    return this.worker !== undefined;
  }

  /** Runs the processor in this process (any number of processes may). */
  start(handlers: TimerHandlers, concurrency = 8): void {
    if (this.worker) return;
    this.worker = new Worker(
      this.name,
      async (job: Job) => {
        if (job.name === 'wake') {
          await handlers.onDue(job.data as TimerJobData);
        } else if (job.name === 'schedule') {
          const { schedule, ...item } = job.data as ScheduleJobData;
          const fire = typeof job.opts.prevMillis === 'number' ? job.opts.prevMillis : job.timestamp + (job.opts.delay ?? 0);
          await handlers.onScheduleFire(schedule, item, fire);
        }
      },
      { connection: this.connection(true), prefix: this.prefix, concurrency },
    );
    this.worker.on('error', () => undefined);
  }

  async close(): Promise<void> {
    // Force the worker closed: a graceful BullMQ close waits for its connection,
    // and never returns while Redis is unreachable (or still reconnecting after an
    // outage). A timer job cut short only loses a wake-up; the sweep covers it.
    // Even forced, BullMQ's close awaits its lock manager and its connections, with no bound: a
    // cleanup after a cluster failover once waited past a minute (not reproduced since), so
    // the connections made here are cut after CLOSE_WAIT_MS whatever BullMQ is waiting on.
    const graceful = Promise.allSettled([this.worker?.close(true), this.queue.close()]);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([graceful, new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_WAIT_MS)))]);
    clearTimeout(timer);
    for (const c of this.owned) c.disconnect();
  }
}
