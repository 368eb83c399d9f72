/**
 * lanewake as a peer of the side-by-side benchmark (bench/compare.ts), in
 * three modes:
 *
 *   wake         Redis wake-ups (WakeChannel), default 5 s backstop sweep
 *   poll 5 s     no Redis: the consumer sweeps the ledger every 5 s
 *   poll 200 ms  no Redis: every 200 ms (the origin system's settings)
 *
 * A namespace is a MariaDB database of its own, `lwc_<ns.id>` (derived from
 * the id, so a worker child process can attach to it), and, in wake mode, the
 * Redis key prefix `lwc:<ns.id>:`. Ordered jobs use lanes: `job.key` is the
 * lane, so one key's jobs run one at a time in enqueue order.
 */
import type * as Lanewake from '../../src/index.js';
import type { EnqueueInput } from '../../src/index.js';
import { benchServerUrl, dropBenchDatabase, onCleanup, withAdmin } from '../support.js';
import type { BenchJob, Namespace, PeerAdapter, PeerFactory, RunningWorker, WorkerOptions, Workload } from './types.js';

/**
 * The compiled package (dist/, built by bench/compare.ts first), as a user
 * runs it: no TypeScript loader work or name-keeping wrappers on lanewake's
 * hot path, just as the peers run their published JavaScript.
 */
const { Consumer, Ledger, Producer, WakeChannel, createLogger } = (await import(
  new URL('../../dist/index.js', import.meta.url).href
)) as typeof Lanewake;
type Consumer = Lanewake.Consumer;
type Ledger = Lanewake.Ledger;
type Producer = Lanewake.Producer;
type WakeChannel = Lanewake.WakeChannel;

const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const QUEUE = 'bench';
const TYPE = 'job';
/** Ledger connections per process: the engine benchmark's setting (32 slots share them). */
const POOL_SIZE = 12;

interface Mode {
  readonly mode: string;
  readonly wake: boolean;
  readonly pollIntervalMs?: number;
  /**
   * The producer gets a wake channel of its own, as a producer in another
   * process has: its wake-ups go through Redis instead of being handed to
   * the consumer in process.
   */
  readonly producerOwnChannel?: boolean;
}

function databaseName(ns: Namespace): string {
  if (!/^[a-z0-9]{1,40}$/.test(ns.id)) throw new Error(`namespace id must be [a-z0-9]{1,40}: ${ns.id}`);
  return `lwc_${ns.id}`;
}

class LanewakeAdapter implements PeerAdapter {
  private readonly dbName: string;
  private readonly url: string;
  private readonly keyPrefix: string;
  private ledger: Ledger | undefined;
  private wake: WakeChannel | undefined;
  private producerWake: WakeChannel | undefined;
  private producer: Producer | undefined;
  private readonly workers = new Set<Consumer>();
  private readonly log = createLogger('bench.lanewake', process.env.LANEWAKE_LOG_LEVEL ?? 'warn');
  private unregisterCleanup: (() => void) | undefined;
  private tornDown = false;

  constructor(
    ns: Namespace,
    private readonly mode: Mode,
  ) {
    this.dbName = databaseName(ns);
    this.url = `${benchServerUrl()}/${this.dbName}`;
    this.keyPrefix = `lwc:${ns.id}:`;
  }

  async setup(): Promise<void> {
    // Registered first, so an interrupted setup is still undone.
    this.unregisterCleanup = onCleanup(() => this.teardown());
    await withAdmin((c) => c.query(`CREATE DATABASE \`${this.dbName}\``));
    const ledger = new Ledger({ url: this.url, poolSize: 2 });
    try {
      await ledger.migrate();
    } finally {
      await ledger.close();
    }
  }

  async connect(): Promise<void> {
    this.ledger = new Ledger({ url: this.url, poolSize: POOL_SIZE });
    this.wake = this.mode.wake ? new WakeChannel({ redis: REDIS_URL, keyPrefix: this.keyPrefix, logger: this.log }) : undefined;
    this.producerWake =
      this.mode.wake && this.mode.producerOwnChannel ? new WakeChannel({ redis: REDIS_URL, keyPrefix: this.keyPrefix, logger: this.log }) : this.wake;
    this.producer = new Producer({ ledger: this.ledger, wake: this.producerWake });
  }

  private item(job: BenchJob): EnqueueInput {
    return { queue: QUEUE, type: TYPE, payload: job, ...(job.key !== undefined ? { lane: job.key } : {}) };
  }

  async enqueueBatch(jobs: readonly BenchJob[]): Promise<void> {
    await this.need(this.producer).enqueueMany(jobs.map((j) => this.item(j)));
  }

  async enqueueOne(job: BenchJob): Promise<void> {
    await this.need(this.producer).enqueue(this.item(job));
  }

  async startWorker(options: WorkerOptions): Promise<RunningWorker> {
    const consumer = new Consumer({
      ledger: this.need(this.ledger),
      wake: this.wake,
      queue: QUEUE,
      concurrency: options.concurrency,
      logger: this.log,
      ...(this.mode.pollIntervalMs !== undefined ? { pollIntervalMs: this.mode.pollIntervalMs } : {}),
      handlers: {
        [TYPE]: async (job: { payload: unknown }) => {
          options.onJob(job.payload as BenchJob);
        },
      },
    });
    this.workers.add(consumer);
    // start() resolves once the consumer's stream group is joined and its loops run.
    await consumer.start();
    return {
      stop: async () => {
        await consumer.stop();
        this.workers.delete(consumer);
      },
    };
  }

  async completedCount(): Promise<number | undefined> {
    const [stats] = await this.need(this.ledger).stats(QUEUE);
    return stats?.counts.completed ?? 0;
  }

  async close(): Promise<void> {
    for (const c of [...this.workers]) await c.stop().catch(() => undefined);
    this.workers.clear();
    if (this.producerWake !== this.wake) await this.producerWake?.close().catch(() => undefined);
    await this.wake?.close().catch(() => undefined);
    await this.ledger?.close().catch(() => undefined);
    this.wake = undefined;
    this.producerWake = undefined;
    this.ledger = undefined;
    this.producer = undefined;
  }

  async teardown(): Promise<void> {
    this.unregisterCleanup?.();
    this.unregisterCleanup = undefined;
    if (this.tornDown) return;
    if (this.mode.wake) {
      const wake = new WakeChannel({ redis: REDIS_URL, keyPrefix: this.keyPrefix, logger: this.log });
      try {
        await wake.timers.close();
        await wake.dropKeys();
      } finally {
        await wake.close();
      }
    }
    await dropBenchDatabase(this.dbName);
    this.tornDown = true;
  }

  private need<T>(v: T | undefined): T {
    if (v === undefined) throw new Error('lanewake adapter: connect() first');
    return v;
  }
}

const ALL: readonly Workload[] = ['bulk', 'latency', 'ordered', 'four-workers', 'sixteen-workers', 'deep-lane'];
/** Why the poll modes run the latency workload only. */
const POLL_NOTE = 'poll modes: latency only (with work waiting, a consumer claims again at once, so throughput is the wake mode\'s claim path)';

/** Why the 'wake via Redis' mode runs the latency workload only. */
const VIA_REDIS_NOTE =
  'latency only: the other workloads enqueue before the worker starts, or from another process, so their wake-ups go through Redis in the wake mode too';

function factory(mode: Mode): PeerFactory {
  const pollOnly = !mode.wake;
  const latencyOnly = pollOnly || mode.producerOwnChannel === true;
  const why = pollOnly ? POLL_NOTE : VIA_REDIS_NOTE;
  return {
    system: 'lanewake',
    mode: mode.mode,
    workloads: latencyOnly ? ['latency'] : ALL,
    notes: latencyOnly
      ? {
          bulk: why,
          ordered: why,
          'four-workers': why,
          'sixteen-workers': why,
          'deep-lane': why,
          latency: pollOnly
            ? `no Redis: ledger sweep every ${mode.mode.replace('poll ', '')}`
            : 'the producer has a wake channel of its own, as in another process: every wake-up goes through the Redis stream',
        }
      : {
          ordered: 'lanes (job key = lane)',
          'deep-lane': 'lanes: head marker, claim cost independent of lane depth',
          latency: 'producer and worker share a process and a wake channel: wake-ups are handed over in process while the worker has free slots',
        },
    ordersByKey: true,
    create: (ns) => new LanewakeAdapter(ns, mode),
  };
}

export const lanewakeFactories: PeerFactory[] = [
  factory({ mode: 'wake', wake: true }),
  factory({ mode: 'wake via Redis', wake: true, producerOwnChannel: true }),
  factory({ mode: 'poll 5 s', wake: false, pollIntervalMs: 5_000 }),
  factory({ mode: 'poll 200 ms', wake: false, pollIntervalMs: 200 }),
];
