import type { ConnectionOptions, Job, Queue, Worker } from 'bullmq';
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
 * BullMQ is loaded on first use: a process that never schedules nor runs a
 * timer (a producer of immediate work, the CLI) does not pay its ~14 MB of
 * RSS (docs/BENCHMARKS.md).
 */
let bullmq: Promise<typeof import('bullmq')> | undefined;
const loadBullmq = (): Promise<typeof import('bullmq')> => (bullmq ??= import('bullmq'));

/**
 * BullMQ carries future `runAfter`s: its jobs only ever publish a wake-up,
 * never hold work. (Recurring schedules live in the ledger, src/schedules/;
 * the ones an older lanewake kept here are read once to be imported.)
 */
export class WakeTimers {
  /** Made on first use (see loadBullmq). */
  private queueMade: Promise<Queue> | undefined;
  /** Set by start(); the worker itself comes once BullMQ is loaded. */
  private workerMade: Promise<Worker> | undefined;
  /** BullMQ's prefix: on a cluster a hash tag, since its scripts touch several keys of one queue at once. */
  private readonly prefix: string;
  /** Cluster clients made here (BullMQ leaves a client it was given open). */
  private readonly owned: Cluster[] = [];
  /** After close(), no queue or worker is made (they would hold connections nobody closes). */
  private closed = false;

  constructor(
    private readonly target: RedisTarget,
    private readonly name = 'lanewake-timers',
    prefix = 'lw',
  ) {
    const cluster = clusterOf(target);
    this.prefix = cluster ? `{${prefix}}` : prefix;
  }

  private queue(): Promise<Queue> {
    if (this.closed && !this.queueMade) return Promise.reject(new Error('wake timers are closed'));
    this.queueMade ??= loadBullmq().then(({ Queue }) => {
      // Fail fast while Redis is away: scheduling a timer is best effort, the sweep is the backstop.
      const queue = new Queue(this.name, { connection: this.connection(false), prefix: this.prefix });
      queue.on('error', () => undefined);
      return queue;
    });
    return this.queueMade;
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
    const queue = await this.queue();
    await queue.addBulk(
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
    const found = await (await this.queue()).getJobSchedulers(0, -1, true);
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
    await (await this.queue()).removeJobScheduler(name);
  }

  /** Whether start() has run in this process. */
  get started(): boolean {
    return this.workerMade !== undefined;
  }

  /** Runs the processor in this process (any number of processes may). */
  start(handlers: TimerHandlers, concurrency = 8): void {
    if (this.workerMade || this.closed) return;
    this.workerMade = loadBullmq().then(({ Worker }) => {
      const worker = new Worker(
        this.name,
        async (job: Job) => {
          // A leftover fire of an old BullMQ job scheduler ('schedule') is dropped: the ledger fires its schedule now.
          if (job.name === 'wake') await handlers.onDue(job.data as TimerJobData);
        },
        { connection: this.connection(true), prefix: this.prefix, concurrency },
      );
      worker.on('error', () => undefined);
      return worker;
    });
    // Nobody awaits the making: a worker that could not be made only loses wake-ups, which the sweep covers.
    this.workerMade.catch(() => undefined);
  }

  async close(): Promise<void> {
    // Force the worker closed: a graceful BullMQ close waits for its connection,
    // and never returns while Redis is unreachable (or still reconnecting after an
    // outage). A timer job cut short only loses a wake-up; the sweep covers it.
    // Even forced, BullMQ's close awaits its lock manager and its connections, with no bound: a
    // cleanup after a cluster failover once waited past a minute (not reproduced since), so
    // the connections made here are cut after CLOSE_WAIT_MS whatever BullMQ is waiting on.
    this.closed = true;
    const graceful = Promise.allSettled([
      this.workerMade?.then((w) => w.close(true)),
      this.queueMade?.then((q) => q.close()),
    ]);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([graceful, new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_WAIT_MS)))]);
    clearTimeout(timer);
    for (const c of this.owned) c.disconnect();
  }
}
