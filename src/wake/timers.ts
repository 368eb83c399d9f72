import { Queue, Worker, type ConnectionOptions, type Job } from 'bullmq';
import type { Cluster, RedisOptions } from 'ioredis';
import { clusterOf, createCluster, plainRedisOptions, type RedisTarget } from './redis.js';
import type { QueueClass } from '../ledger/types.js';
import type { RecurringSchedule } from '../ledger/schedule-types.js';

export interface WakeTimer {
  queue: string;
  queueClass: QueueClass;
  itemId: string;
  attempt: number;
  runAt: Date;
}

interface TimerJobData {
  queue: string;
  queueClass: QueueClass;
  itemId: string;
}

/**
 * A recurring schedule's job data as lanewake before schema 12 kept it in BullMQ (now only read, to
 * import it into the ledger).
 */
type ScheduleJobData = RecurringSchedule['item'] & { schedule: string };

export interface TimerHandlers {
  /** A delayed item is due: publish its wake-up. */
  onDue: (timer: TimerJobData) => Promise<void>;
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
 * BullMQ carries future `runAfter`s: its jobs only ever publish a wake-up,
 * never hold work. (Recurring schedules live in the ledger, src/schedules/;
 * the ones an older lanewake kept here are read once to be imported.)
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
      return blocking
        ? { ...plain, maxRetriesPerRequest: null }
        : { ...plain, enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: SCHEDULE_COMMAND_TIMEOUT_MS };
    }
    const client = blocking
      ? createCluster(cluster, { clusterRetryStrategy: (t) => Math.min(1000, 50 * t) }, { maxRetriesPerRequest: null })
      : createCluster(
          cluster,
          { clusterRetryStrategy: (t) => Math.min(1000, 50 * t), enableOfflineQueue: false },
          { maxRetriesPerRequest: 1, commandTimeout: SCHEDULE_COMMAND_TIMEOUT_MS },
        );
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

  /**
   * The recurring schedules lanewake kept here as BullMQ job schedulers
   * before schema 12 (`producer.schedule` made them), as definitions for
   * the ledger. Job schedulers of another shape are not lanewake's and are left out.
   */
  async legacySchedules(): Promise<RecurringSchedule[]> {
    const found = await this.queue.getJobSchedulers(0, -1, true);
    return found.flatMap((j): RecurringSchedule[] => {
      const data = j.template?.data as Partial<ScheduleJobData> | undefined;
      if (j.name !== 'schedule' || !data || typeof data.schedule !== 'string') return [];
      const { schedule: _schedule, ...item } = data as ScheduleJobData;
      const timing =
        j.pattern !== undefined
          ? { pattern: j.pattern, ...(j.tz !== undefined ? { tz: j.tz } : {}) }
          : { everyMs: Number(j.every) };
      return [{ name: j.key, ...timing, item }];
    });
  }

  /** Removes an old BullMQ job scheduler (and its next delayed fire), once the ledger holds the schedule. */
  async removeLegacySchedule(name: string): Promise<void> {
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
        // A leftover fire of an old BullMQ job scheduler ('schedule') is dropped: the ledger fires its schedule now.
        if (job.name === 'wake') await handlers.onDue(job.data as TimerJobData);
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
