/**
 * pg-boss 10 as a peer of the side-by-side benchmark, in its documented throughput configuration (TUNED). A
 * namespace is the schema `pgb_<ns.id>` (pg-boss installs itself there at start()). `db` is a pg.Pool built as
 * pg-boss builds its own, counting statements in flight: pg-boss 10's offWork() returns before its workers stop
 * and does not await the complete() after a handler, so stop() waits for both and completedCount() is exact.
 * No per-key FIFO (NO_FIFO).
 */
import PgBoss from 'pg-boss';
import pg from 'pg';
import {
  nsName,
  PG_URL,
  type BenchJob,
  type Namespace,
  type PeerAdapter,
  type PeerFactory,
  type RunningWorker,
  type WorkerOptions,
  type Workload,
} from './types.js';
import { recordWarning } from './warnings.js';

const QUEUE = 'bench';
/** pg-boss 10 opens `new pg.Pool(config)` with no `max`: pg's default, 10. */
const POOL_MAX = 10;
/** How long stop() waits for in-flight handlers and pg-boss's completion writes. */
const STOP_DEADLINE_MS = 60_000;

async function withClient<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: PG_URL, application_name: 'bench.pgboss.admin' });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

/** pg-boss's `db` option: a pg.Pool like its own, counting statements in flight. */
class CountingDb implements PgBoss.Db {
  readonly pool: pg.Pool;
  inFlight = 0;

  constructor() {
    this.pool = new pg.Pool({ connectionString: PG_URL, max: POOL_MAX, application_name: 'pgboss' });
    // pg-boss's own Db forwards pool errors as 'error' events; idle-client errors must not crash the process.
    this.pool.on('error', (err) => recordWarning('pg-boss pool error', err.message));
  }

  async executeSql(text: string, values?: unknown[]): Promise<{ rows: unknown[] }> {
    this.inFlight++;
    try {
      return await this.pool.query(text, values);
    } finally {
      this.inFlight--;
    }
  }
}

interface Mode {
  readonly mode: string;
  /** work() registrations and their batchSize for the harness's concurrency (in flight = workers × batchSize). */
  readonly layout: (concurrency: number) => { workers: number; batchSize: number };
  /** `pollingIntervalSeconds` passed to work(). */
  readonly pollingIntervalSeconds: number;
  /** notifyWorker(id) after a full fetch, so a worker with a backlog fetches again at once. */
  readonly notifyWhenFull: boolean;
  readonly workloads: readonly Workload[];
  readonly notes: Partial<Record<Workload, string>>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

class PgBossAdapter implements PeerAdapter {
  private readonly schema: string;
  private boss: PgBoss | undefined;
  private db: CountingDb | undefined;
  private admin: pg.Pool | undefined;
  private readonly running = new Set<RunningWorker>();
  private unregisterCleanup: (() => void) | undefined;

  constructor(
    ns: Namespace,
    private readonly mode: Mode,
  ) {
    this.schema = nsName('pgb_', ns);
  }

  private newBoss(db: PgBoss.Db): PgBoss {
    const boss = new PgBoss({ db, schema: this.schema });
    // An 'error' event without a listener would crash the process. (Its warnings go through process.emitWarning.)
    boss.on('error', (err) => recordWarning('pg-boss error', err.message));
    return boss;
  }

  async setup(): Promise<void> {
    // Registered first, so an interrupted setup is still undone; support.js (mysql2) loaded here, not in children.
    const { onCleanup } = await import('../support.js');
    this.unregisterCleanup = onCleanup(() => this.teardown());
    const exists = await withClient((c) => c.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [this.schema]));
    if (exists.rowCount !== 0) throw new Error(`pg-boss namespace ${this.schema} is not fresh`);
    const db = new CountingDb();
    try {
      // start() creates the schema and installs pg-boss's tables in it.
      const boss = this.newBoss(db);
      await boss.start();
      await boss.createQueue(QUEUE);
      await boss.stop({ graceful: false });
    } finally {
      await db.pool.end().catch(() => undefined);
    }
  }

  async connect(): Promise<void> {
    const db = new CountingDb();
    const boss = this.newBoss(db);
    try {
      await boss.start();
    } catch (err) {
      await db.pool.end().catch(() => undefined);
      throw err;
    }
    this.db = db;
    this.boss = boss;
    this.admin = new pg.Pool({ connectionString: PG_URL, max: 2, application_name: 'bench.pgboss.count' });
    this.admin.on('error', () => undefined);
  }

  async enqueueBatch(jobs: readonly BenchJob[]): Promise<void> {
    await this.need(this.boss).insert(jobs.map((data) => ({ name: QUEUE, data })));
  }

  async enqueueOne(job: BenchJob): Promise<void> {
    const id = await this.need(this.boss).send(QUEUE, job);
    if (id === null) throw new Error('pg-boss send() returned null (job not created)');
  }

  async startWorker(options: WorkerOptions): Promise<RunningWorker> {
    const boss = this.need(this.boss);
    const db = this.need(this.db);
    const { workers, batchSize } = this.mode.layout(options.concurrency);
    const workOptions: PgBoss.WorkOptions = { batchSize, pollingIntervalSeconds: this.mode.pollingIntervalSeconds };
    let handling = 0;
    const ids: string[] = [];
    for (let i = 0; i < workers; i++) {
      let self: string | undefined;
      const id = await boss.work<BenchJob>(QUEUE, workOptions, async (jobs) => {
        handling++;
        try {
          // A batch's jobs run side by side (the maintainer's pattern for batches, timgit/pg-boss#542).
          await Promise.all(jobs.map(async (job) => options.onJob(job.data)));
        } finally {
          handling--;
        }
        if (this.mode.notifyWhenFull && jobs.length >= batchSize && self !== undefined) boss.notifyWorker(self);
      });
      self = id;
      ids.push(id);
    }
    let stopped: Promise<void> | undefined;
    const running: RunningWorker = {
      stop: () =>
        (stopped ??= (async () => {
          for (const id of ids) await boss.offWork({ id });
          // offWork() only flags the workers: a fetch in flight still hands its jobs to the handler,
          // and each batch's complete() runs unawaited after the handler. Wait (polling between
          // macrotasks, so every microtask hop in between has run) until nothing of that is left.
          const deadline = Date.now() + STOP_DEADLINE_MS;
          while (handling > 0 || db.inFlight > 0) {
            if (Date.now() > deadline) throw new Error(`pg-boss worker did not stop within ${STOP_DEADLINE_MS} ms`);
            await sleep(5);
          }
          this.running.delete(running);
        })()),
    };
    this.running.add(running);
    return running;
  }

  async completedCount(): Promise<number> {
    // Completed jobs stay in the job table until maintenance archives them
    // (archiveCompletedAfterSeconds, default 12 h), then in the archive until
    // deleted (deleteAfterDays, default 7): count both.
    const { rows } = await this.need(this.admin).query<{ n: string }>(
      `SELECT (SELECT count(*) FROM ${this.schema}.job WHERE name = $1 AND state = 'completed')
            + (SELECT count(*) FROM ${this.schema}.archive WHERE name = $1 AND state = 'completed') AS n`,
      [QUEUE],
    );
    return Number(rows[0]?.n ?? 0);
  }

  async close(): Promise<void> {
    for (const r of [...this.running]) await r.stop().catch(() => undefined);
    this.running.clear();
    // The workers are stopped already; a graceful stop would poll for work in progress every 500 ms.
    await this.boss?.stop({ graceful: false }).catch(() => undefined);
    await this.db?.pool.end().catch(() => undefined);
    await this.admin?.end().catch(() => undefined);
    this.boss = undefined;
    this.db = undefined;
    this.admin = undefined;
  }

  async teardown(): Promise<void> {
    this.unregisterCleanup?.();
    this.unregisterCleanup = undefined;
    await withClient((c) => c.query(`DROP SCHEMA IF EXISTS ${this.schema} CASCADE`));
  }

  private need<T>(v: T | undefined): T {
    if (v === undefined) throw new Error('pg-boss adapter: connect() first');
    return v;
  }
}

const NO_FIFO =
  'n/a: pg-boss 10.4.2 has no per-key FIFO policy (its policies are ' +
  "standard/short/singleton/stately; 'singleton' + singletonKey caps a key at one " +
  'active job but does not keep enqueue order: a batch insert ties on created_on ' +
  "and falls back to random uuid order, and two fetches can activate a key's later " +
  "job first); 'key_strict_fifo' arrived in pg-boss 12, which declares engines " +
  'node >=22.12';

function factory(mode: Mode): PeerFactory {
  return {
    system: 'pg-boss',
    mode: mode.mode,
    workloads: mode.workloads,
    notes: { ordered: NO_FIFO, 'deep-lane': NO_FIFO, ...mode.notes },
    ordersByKey: false,
    create: (ns) => new PgBossAdapter(ns, mode),
  };
}

/**
 * TUNED: the documented throughput settings of work(): batchSize, the minimum pollingIntervalSeconds (0.5), and
 * notifyWorker() after a full fetch. 32 in flight = ONE work() with batchSize 32 running its jobs side by side
 * (timgit/pg-boss#542); measured here it beat 4 × 8, 8 × 4 and 32 × 1 (the maintainer's N work() calls,
 * timgit/pg-boss#659). The costs: a batch waits for its slowest job, an idle queue is polled every 0.5 s.
 */
const TUNED: Mode = {
  mode: 'batch worker, poll 0.5 s',
  layout: (concurrency) => ({ workers: 1, batchSize: concurrency }),
  pollingIntervalSeconds: 0.5,
  notifyWhenFull: true,
  workloads: ['bulk', 'latency', 'latency-in-process', 'four-workers', 'sixteen-workers'],
  notes: {
    bulk: 'one work() with batchSize = concurrency (32), poll 0.5 s, notifyWorker() after a full batch',
    latency: 'one batch worker polling every 0.5 s (the documented minimum; pg-boss 10 has no LISTEN/NOTIFY wake-up)',
    'latency-in-process': 'one batch worker polling every 0.5 s (the documented minimum)',
    'four-workers': 'each process: one work() with batchSize 32, poll 0.5 s, notifyWorker() after a full batch',
    'sixteen-workers': 'each process: one work() with batchSize 8, poll 0.5 s, notifyWorker() after a full batch',
  },
};

export const pgBossFactories: PeerFactory[] = [factory(TUNED)];
