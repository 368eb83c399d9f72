/**
 * BullMQ as a peer of the side-by-side benchmark, with its defaults: addBulk / add, one Worker per process with
 * `concurrency`. Set: maxRetriesPerRequest null (required for workers), prefix `bqb:<ns.id>` (the namespace,
 * deleted by SCAN + UNLINK). Completed jobs stay in the completed set (the default), which completedCount() reads;
 * their durability is Redis's persistence, recorded with the results.
 */
import { Queue, Worker, type ConnectionOptions, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { plainRedisOptions } from '../../src/wake/redis.js';
import {
  nsName,
  REDIS_URL,
  type BenchJob,
  type Namespace,
  type PeerAdapter,
  type PeerFactory,
  type RunningWorker,
  type WorkerOptions,
} from './types.js';
import { recordWarning } from './warnings.js';

const QUEUE = 'bench';
const JOB_NAME = 'job';

function connectionOptions(): ConnectionOptions {
  return { ...plainRedisOptions(REDIS_URL), maxRetriesPerRequest: null };
}

/** Runs `fn` on a short-lived plain ioredis client (teardown and leftover checks). */
async function withRedis<T>(fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, connectionName: 'bench.bullmq.admin' });
  r.on('error', () => undefined);
  try {
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

async function scanKeys(r: Redis, pattern: string, onBatch: (keys: string[]) => Promise<void>): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await r.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await onBatch(keys);
  } while (cursor !== '0');
}

/** Keys of the namespace still in Redis (empty after a clean teardown). */
async function bullmqLeftovers(ns: Namespace): Promise<string[]> {
  const found: string[] = [];
  await withRedis((r) =>
    scanKeys(r, `${nsName('bqb:', ns)}:*`, async (keys) => {
      found.push(...keys);
    }),
  );
  return found;
}

class BullmqAdapter implements PeerAdapter {
  private readonly prefix: string;
  private queue: Queue<BenchJob> | undefined;
  private readonly workers = new Set<Worker<BenchJob>>();
  private unregisterCleanup: (() => void) | undefined;

  constructor(private readonly ns: Namespace) {
    this.prefix = nsName('bqb:', ns);
  }

  async setup(): Promise<void> {
    // Registered first, so an interrupted run is still undone; support.js (mysql2) loaded here, not in children.
    const { onCleanup } = await import('../support.js');
    this.unregisterCleanup = onCleanup(() => this.teardown());
    const stale = await bullmqLeftovers(this.ns);
    if (stale.length > 0) throw new Error(`bullmq namespace ${this.prefix} is not fresh: ${stale.length} keys exist`);
  }

  async connect(): Promise<void> {
    const queue = new Queue<BenchJob>(QUEUE, { connection: connectionOptions(), prefix: this.prefix });
    // An unhandled 'error' event would crash the process; kept for the run's result.
    queue.on('error', (err) => recordWarning('bullmq queue error', err.message));
    await queue.waitUntilReady();
    this.queue = queue;
  }

  async enqueueBatch(jobs: readonly BenchJob[]): Promise<void> {
    await this.need(this.queue).addBulk(jobs.map((data) => ({ name: JOB_NAME, data })));
  }

  async enqueueOne(job: BenchJob): Promise<void> {
    await this.need(this.queue).add(JOB_NAME, job);
  }

  async startWorker(options: WorkerOptions): Promise<RunningWorker> {
    const worker = new Worker<BenchJob>(
      QUEUE,
      async (job: Job<BenchJob>) => {
        options.onJob(job.data);
      },
      { connection: connectionOptions(), prefix: this.prefix, concurrency: options.concurrency },
    );
    worker.on('error', (err) => recordWarning('bullmq worker error', err.message));
    this.workers.add(worker);
    try {
      // Resolves once both its connections (normal and blocking) are ready.
      await worker.waitUntilReady();
    } catch (err) {
      this.workers.delete(worker);
      await worker.close(true).catch(() => undefined);
      throw err;
    }
    let stopped: Promise<void> | undefined;
    return {
      // close() stops fetching and waits for the jobs in flight to finish (and be moved to completed).
      stop: () =>
        (stopped ??= worker.close().finally(() => {
          this.workers.delete(worker);
        })),
    };
  }

  async completedCount(): Promise<number> {
    return this.need(this.queue).getCompletedCount();
  }

  async close(): Promise<void> {
    for (const w of [...this.workers]) await w.close().catch(() => undefined);
    this.workers.clear();
    await this.queue?.close().catch(() => undefined);
    this.queue = undefined;
  }

  async teardown(): Promise<void> {
    this.unregisterCleanup?.();
    this.unregisterCleanup = undefined;
    // Every key of the run, whatever created it (queue, events stream, meta, markers): SCAN + UNLINK.
    await withRedis((r) =>
      scanKeys(r, `${this.prefix}:*`, async (keys) => {
        await r.unlink(...keys);
      }),
    );
  }

  private need<T>(v: T | undefined): T {
    if (v === undefined) throw new Error('bullmq adapter: connect() first');
    return v;
  }
}

const NO_GROUPS = 'n/a: BullMQ has no per-key FIFO in its open-source edition (groups are BullMQ Pro)';

export const bullmqFactories: PeerFactory[] = [
  {
    system: 'bullmq',
    mode: 'defaults',
    workloads: ['bulk', 'latency', 'latency-in-process', 'four-workers', 'sixteen-workers'],
    notes: { ordered: NO_GROUPS, 'deep-lane': NO_GROUPS },
    ordersByKey: false,
    create: (ns) => new BullmqAdapter(ns),
  },
];
