/**
 * lanewake as a peer of the side-by-side benchmark (bench/compare.ts), in
 * four modes:
 *
 *   wake                        as deployed: Redis wake-ups (WakeChannel), the
 *                               producer with a wake channel of its own (as in
 *                               another process), default 5 s backstop sweep.
 *                               The reference of every ratio.
 *   wake, in-process handover   producer and worker share one wake channel in
 *                               one process: the shortcut of docs/design/parts.md
 *                               (wake-up handed over in memory, items inserted
 *                               already claimed); its own row, in-process only
 *   poll 5 s                    no Redis: the consumer sweeps the ledger every 5 s
 *   poll 200 ms                 no Redis: every 200 ms (the origin system's settings)
 *
 * A namespace is a MariaDB database of its own, `lwc_<ns.id>` (derived from
 * the id, so a worker child process can attach to it), and, with Redis, the
 * key prefix `lwc:<ns.id>:`. Ordered jobs use lanes: `job.key` is the lane,
 * so one key's jobs run one at a time in enqueue order.
 */
import type * as Lanewake from '../../src/index.js';
import type { EnqueueInput } from '../../src/index.js';
import { createConnection, type Connection, type RowDataPacket } from 'mysql2/promise';
import { benchServerUrl, dropBenchDatabase, onCleanup, withAdmin } from '../support.js';
import {
  nsName,
  REDIS_URL,
  type BenchJob,
  type Namespace,
  type PeerAdapter,
  type PeerFactory,
  type RunningWorker,
  type WorkerOptions,
  type Workload,
} from './types.js';
import { recordWarning } from './warnings.js';

/**
 * The compiled package (dist/, built by bench/compare.ts first), as a user
 * runs it: no TypeScript loader work or name-keeping wrappers on lanewake's
 * hot path, just as the peers run their published JavaScript.
 */
const { Consumer, Ledger, Producer, WakeChannel, createLogger, setLogDestination } = (await import(
  new URL('../../dist/index.js', import.meta.url).href
)) as typeof Lanewake;

/** lanewake's log lines go to stderr as before; its warnings and errors are also kept for the run's result. */
setLogDestination({
  write(line: string): void {
    process.stderr.write(line);
    try {
      const entry = JSON.parse(line) as { level?: number; name?: string; msg?: string; err?: { message?: string } };
      if ((entry.level ?? 0) < 40) return;
      recordWarning(
        `lanewake ${entry.name ?? ''}`.trim(),
        `${entry.msg ?? ''}${entry.err?.message ? `: ${entry.err.message}` : ''}`,
        { printed: true },
      );
    } catch {
      recordWarning('lanewake', line, { printed: true });
    }
  },
});
type Consumer = Lanewake.Consumer;
type Ledger = Lanewake.Ledger;
type Producer = Lanewake.Producer;
type WakeChannel = Lanewake.WakeChannel;

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

class LanewakeAdapter implements PeerAdapter {
  private readonly dbName: string;
  private readonly url: string;
  private readonly keyPrefix: string;
  private ledger: Ledger | undefined;
  private wake: WakeChannel | undefined;
  private producerWake: WakeChannel | undefined;
  private producer: Producer | undefined;
  /** Reads the ledger's completed count (the process that enqueues only). */
  private counter: Connection | undefined;
  private readonly workers = new Set<Consumer>();
  private readonly log = createLogger('bench.lanewake', process.env.LANEWAKE_LOG_LEVEL ?? 'warn');
  private unregisterCleanup: (() => void) | undefined;
  private tornDown = false;

  constructor(
    ns: Namespace,
    private readonly mode: Mode,
  ) {
    this.dbName = nsName('lwc_', ns);
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
    this.wake = this.mode.wake
      ? new WakeChannel({ redis: REDIS_URL, keyPrefix: this.keyPrefix, logger: this.log })
      : undefined;
    this.producerWake =
      this.mode.wake && this.mode.producerOwnChannel
        ? new WakeChannel({ redis: REDIS_URL, keyPrefix: this.keyPrefix, logger: this.log })
        : this.wake;
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

  /**
   * The ledger's rows in state completed, counted whole (Ledger.stats caps
   * history counts at 10,000), over index ranges of ix_claim (one per queue class).
   */
  async completedCount(): Promise<number> {
    this.counter ??= await createConnection(this.url);
    const [rows] = await this.counter.query<RowDataPacket[]>(
      'SELECT COUNT(*) AS n FROM lw_items WHERE queue = ? AND queue_class IN ' +
        "('interactive', 'default', 'bulk') AND state = 'completed'",
      [QUEUE],
    );
    return Number(rows[0]?.n ?? 0);
  }

  async close(): Promise<void> {
    for (const c of [...this.workers]) await c.stop().catch(() => undefined);
    this.workers.clear();
    if (this.producerWake !== this.wake) await this.producerWake?.close().catch(() => undefined);
    await this.wake?.close().catch(() => undefined);
    await this.ledger?.close().catch(() => undefined);
    await this.counter?.end().catch(() => undefined);
    this.counter = undefined;
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

const ALL: readonly Workload[] = [
  'bulk',
  'latency',
  'latency-in-process',
  'ordered',
  'four-workers',
  'sixteen-workers',
  'deep-lane',
];

/** `others`: why the workloads this mode does not run are measured in the wake mode instead. */
function factory(
  mode: Mode,
  workloads: readonly Workload[],
  others: string,
  notes: Partial<Record<Workload, string>>,
): PeerFactory {
  const skipped = Object.fromEntries(ALL.filter((w) => !workloads.includes(w)).map((w) => [w, others]));
  return {
    system: 'lanewake',
    mode: mode.mode,
    workloads,
    notes: { ...skipped, ...notes },
    ordersByKey: true,
    create: (ns) => new LanewakeAdapter(ns, mode),
  };
}

const POLL_ONLY =
  'poll modes: the two-process latency row only (with work waiting, a consumer ' +
  "claims again at once, so their throughput is the wake mode's)";
const pollMode = (mode: string, ms: number): PeerFactory =>
  factory({ mode, wake: false, pollIntervalMs: ms }, ['latency'], POLL_ONLY, {
    latency: `no Redis: the worker process sweeps the ledger every ${mode.replace('poll ', '')}`,
  });

export const lanewakeFactories: PeerFactory[] = [
  factory({ mode: 'wake', wake: true, producerOwnChannel: true }, ALL, '', {
    latency: 'producer process and worker process: every wake-up goes through the Redis stream',
    'latency-in-process':
      'the producer has a wake channel of its own, as in another process: every wake-up goes through the Redis stream',
    ordered: 'lanes (job key = lane)',
    'deep-lane': 'lanes: head marker, claim cost independent of lane depth',
  }),
  factory(
    { mode: 'wake, in-process handover', wake: true },
    ['latency-in-process'],
    'the in-process shortcut is one row of its own (latency-in-process); every other row is the wake mode',
    {
      'latency-in-process':
        'producer and worker share one wake channel in one process: the wake-up is ' +
        'handed over in memory and items the worker has room for are inserted already ' +
        'claimed (design.md §1), a shortcut no producer in another process has',
    },
  ),
  pollMode('poll 5 s', 5_000),
  pollMode('poll 200 ms', 200),
];
