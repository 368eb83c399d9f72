/**
 * graphile-worker (0.17.x) adapters for the side-by-side benchmark (issue 5).
 *
 * Two modes, both graphile-worker's documented performance configuration as
 * far as it works for the row; same schema / task / enqueue path:
 *
 *  - 'local queue + batched completion': the options graphile-worker's own
 *    performance page and perf test use (cited at tunedPreset() below), for
 *    every unordered row.
 *
 *  - 'batched completion, no local queue': the same without the local
 *    queue, for the ordered rows (ordered, deep-lane): in 0.17.3 the local
 *    queue runs several jobs of one named queue at once (graphile/worker#621),
 *    so named queues, graphile-worker's per-key order, cannot use it.
 *
 * Both size the pool above the concurrency (graphile-worker warns when it is
 * smaller); every warning and error its logger prints is kept for the run's
 * result (bench/peers/warnings.ts).
 *
 * Namespace: one PostgreSQL schema `gw_<ns.id>` (graphile-worker's `schema`
 * option); setup() runs the migrations, teardown() drops the schema.
 *
 * Ordering: a job with a `key` gets `queueName: key` (graphile-worker named
 * queues run one job at a time per queue). Jobs without a key get no queue.
 * graphile-worker orders a queue by (priority, run_at) only; jobs added by one
 * `add_jobs` call share `run_at = now()`, so enqueueBatch gives keyed jobs
 * explicit, strictly increasing run_at values (see ADD_JOBS_SQL) to make the
 * per-key FIFO the harness checks well defined.
 *
 * graphile-worker deletes a job in the statement that records its
 * completion, so completedCount() is the rows add_jobs reported inserted
 * less the rows left in the jobs table (a failed job stays, with its error).
 */
import { EventEmitter } from 'node:events';
import pg from 'pg';
import {
  Logger,
  makeWorkerUtils,
  run,
  runMigrations,
  type AddJobsJobSpec,
  type Runner,
  type RunnerOptions,
  type TaskList,
  type WorkerEvents,
  type WorkerUtils,
} from 'graphile-worker';
import type { BenchJob, Namespace, PeerAdapter, PeerFactory, RunningWorker, WorkerOptions, Workload } from './types.js';
import { recordWarning } from './warnings.js';

/** PostgreSQL server the peers use (trust auth on the bench machine). */
export function graphileConnectionString(): string {
  return process.env.LANEWAKE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
}

const TASK = 'bench';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * graphile-worker's documented throughput configuration.
 *
 * https://worker.graphile.org/docs/performance ("Quick stats", 183k jobs/s):
 *   concurrentJobs: 24, maxPoolSize: 25,
 *   localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0
 * graphile/worker perfTest/graphile.config.js (the config `yarn perfTest` runs):
 *   concurrentJobs: CONCURRENT_JOBS, maxPoolSize: CONCURRENT_JOBS + 1,
 *   localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
 *   completeJobBatchDelay: 0, failJobBatchDelay: 0
 * We take the perf test's values (a superset of the docs page's); concurrency
 * is the harness's, so maxPoolSize = concurrency + 1 is computed per worker.
 * Option names checked against the installed 0.17.3 types
 * (GraphileConfig.WorkerOptions in node_modules/graphile-worker/dist/index.d.ts).
 */
function tunedPreset(concurrency: number): GraphileConfig.Preset {
  return {
    worker: {
      maxPoolSize: concurrency + 1,
      localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  };
}

/** tunedPreset() without the local queue, which breaks named queues in 0.17.3 (graphile/worker#621). */
function namedQueuePreset(concurrency: number): GraphileConfig.Preset {
  return { worker: { maxPoolSize: concurrency + 1, completeJobBatchDelay: 0, failJobBatchDelay: 0 } };
}

/**
 * graphile-worker logs one INFO line per completed job ("Completed task …
 * with success") unless NO_LOG_SUCCESS is set when the module loads; its own
 * perf test sets NO_LOG_SUCCESS=1. Per-job console output would measure the
 * terminal, not the queue, so INFO/DEBUG are dropped; every warning and error
 * is printed and kept for the run's result.
 */
const quietLogger = new Logger(() => (level, message) => {
  const l = String(level);
  if (l !== 'error' && l !== 'warning') return;
  recordWarning(`graphile-worker ${l}`, message);
});

/** ns.id is documented [a-z0-9]; checked here because it becomes an SQL identifier. */
function schemaFor(ns: Namespace): string {
  if (!/^[a-z0-9]{1,50}$/.test(ns.id))
    throw new Error(`graphile peer: namespace id must be [a-z0-9]{1,50}, got ${JSON.stringify(ns.id)}`);
  return `gw_${ns.id}`;
}

function asBenchJob(payload: unknown): BenchJob {
  if (typeof payload === 'object' && payload !== null && typeof (payload as { n?: unknown }).n === 'number') {
    return payload as BenchJob;
  }
  throw new Error(`graphile peer: unexpected payload ${JSON.stringify(payload)}`);
}

/** What is stored as the job payload: the BenchJob's own fields, nothing else. */
function payloadOf(job: BenchJob): BenchJob {
  const p: { n: number; key?: string; seq?: number; enqueuedAtUs?: number } = { n: job.n };
  if (job.key !== undefined) p.key = job.key;
  if (job.seq !== undefined) p.seq = job.seq;
  if (job.enqueuedAtUs !== undefined) p.enqueuedAtUs = job.enqueuedAtUs;
  return p;
}

/**
 * Strictly increasing run_at values for keyed jobs in one enqueueBatch call.
 * `add_jobs` stamps every job of a call with the same `now()`, and
 * graphile-worker picks a queue's next job by `order by priority, run_at`
 * alone (getJobs.ts), so jobs of one key inside one batch would tie and run
 * in physical (heap) order, which PostgreSQL does not promise to be the array
 * order. Giving each keyed job of the batch `batchStart - (count - i) µs`
 * keeps them immediately runnable, in array order, and (since one add_jobs
 * round trip takes far longer than the batch's few ms of offsets) after every
 * earlier batch. Node's Date only has millisecond precision, so this goes
 * through the SQL function with a µs offset rather than AddJobsJobSpec.runAt.
 */
const ADD_JOBS_SQL = (schema: string): string => `\
select count(*)::int as n from "${schema}".add_jobs(
  array(
    select (
      s.identifier, s.payload, s.queue_name,
      case when s.queue_name is null then null else now() - make_interval(secs => (s.lag_us::float8) / 1e6) end,
      null, null, null, null
    )::"${schema}".job_spec
    from json_to_recordset($1::json) as s(identifier text, payload json, queue_name text, lag_us bigint)
  ),
  false
)`;

interface SpecRow {
  identifier: string;
  payload: BenchJob;
  queue_name: string | null;
  lag_us: number;
}

type Mode = 'tuned' | 'named queues';

class GraphileAdapter implements PeerAdapter {
  private readonly schema: string;
  private utils: WorkerUtils | undefined;
  private readonly runners = new Set<Runner>();
  /** Rows add_jobs reported inserted through this adapter (completedCount's base). */
  private inserted = 0;

  constructor(
    ns: Namespace,
    private readonly mode: Mode,
  ) {
    this.schema = schemaFor(ns);
  }

  private baseOptions(): RunnerOptions {
    return { connectionString: graphileConnectionString(), schema: this.schema, logger: quietLogger };
  }

  async setup(): Promise<void> {
    // Installs the schema (create schema if not exists + all migrations) once,
    // in the parent, so connect()/run() in worker children find it current.
    await runMigrations(this.baseOptions());
  }

  async connect(): Promise<void> {
    if (this.utils) return;
    // makeWorkerUtils also checks the migrations (a no-op after setup()).
    this.utils = await makeWorkerUtils(this.baseOptions());
  }

  private requireUtils(): WorkerUtils {
    if (!this.utils) throw new Error('graphile peer: connect() first');
    return this.utils;
  }

  async enqueueBatch(jobs: readonly BenchJob[]): Promise<void> {
    if (jobs.length === 0) return;
    const utils = this.requireUtils();
    const keyed = jobs.reduce((c, j) => (j.key === undefined ? c : c + 1), 0);
    if (keyed === 0) {
      // Plain bulk API (one add_jobs round trip).
      const specs: AddJobsJobSpec[] = jobs.map((j) => ({ identifier: TASK, payload: payloadOf(j) }));
      this.inserted += (await utils.addJobs(specs)).length;
      return;
    }
    // Same add_jobs function, one round trip, with per-job run_at for keyed jobs.
    let k = keyed;
    const rows: SpecRow[] = jobs.map((j) => ({
      identifier: TASK,
      payload: payloadOf(j),
      queue_name: j.key ?? null,
      lag_us: j.key === undefined ? 0 : k--,
    }));
    const r = await utils.withPgClient((client) =>
      client.query<{ n: number }>(ADD_JOBS_SQL(this.schema), [JSON.stringify(rows)]),
    );
    this.inserted += r.rows[0]?.n ?? 0;
  }

  async enqueueOne(job: BenchJob): Promise<void> {
    const utils = this.requireUtils();
    await utils.addJob(TASK, payloadOf(job), job.key === undefined ? {} : { queueName: job.key });
    this.inserted++;
  }

  async startWorker(options: WorkerOptions): Promise<RunningWorker> {
    const { onJob, concurrency } = options;
    const taskList: TaskList = {
      [TASK]: (payload: unknown) => {
        onJob(asBenchJob(payload));
      },
    };
    const events = new EventEmitter() as WorkerEvents;
    // "Ready" = a notification on "jobs:insert" has reached this pool, i.e.
    // its LISTEN is in effect (graphile emits 'pool:listen:success' just
    // before it sends LISTEN). We probe with NOTIFY payload {"count":0}:
    // graphile parses the count and only nudges workers when it is > 0, so
    // the probe wakes nobody here or in any other worker process. (Workers
    // also fetch once at start, and a notification that arrives while a
    // worker is mid-fetch makes it fetch again, so nothing inserted after
    // this point waits for the 2 s poll.)
    let listenSucceeded = false;
    let notified = false;
    let listenError: unknown;
    events.once('pool:listen:success', () => void (listenSucceeded = true));
    events.once('pool:listen:notification', () => void (notified = true));
    events.once('pool:listen:error', ({ error }) => void (listenError = error));
    const runner = await run({
      ...this.baseOptions(),
      concurrency,
      noHandleSignals: true,
      taskList,
      events,
      preset: this.mode === 'tuned' ? tunedPreset(concurrency) : namedQueuePreset(concurrency),
    });
    this.runners.add(runner);
    let exited = false;
    runner.promise.then(
      () => void (exited = true),
      () => void (exited = true),
    );
    try {
      const deadline = Date.now() + 15_000;
      while (!notified) {
        if (listenError !== undefined) throw new Error(`graphile-worker LISTEN failed: ${String(listenError)}`);
        if (exited) throw new Error('graphile-worker runner exited before it was listening');
        if (Date.now() > deadline) throw new Error('graphile-worker runner not listening after 15 s');
        if (listenSucceeded) await this.notifyProbe();
        await sleep(listenSucceeded ? 5 : 1);
      }
    } catch (e) {
      await this.stopRunner(runner).catch(() => undefined);
      throw e;
    }
    let stopped: Promise<void> | undefined;
    return {
      stop: () => (stopped ??= this.stopRunner(runner)),
    };
  }

  private async notifyProbe(): Promise<void> {
    const sql = `select pg_notify('jobs:insert', '{"count":0}')`;
    if (this.utils) {
      await this.utils.withPgClient((c) => c.query(sql));
      return;
    }
    const c = new pg.Client({ connectionString: graphileConnectionString() });
    await c.connect();
    try {
      await c.query(sql);
    } finally {
      await c.end();
    }
  }

  /**
   * runner.stop(): graceful shutdown (waits for in-flight jobs, flushes batched completions, returns local-queue jobs)
   * and ends the runner's pool.
   */
  private async stopRunner(runner: Runner): Promise<void> {
    if (!this.runners.delete(runner)) return;
    await runner.stop();
    await runner.promise;
  }

  async completedCount(): Promise<number> {
    const r = await this.requireUtils().withPgClient((c) =>
      c.query<{ n: number }>(`select count(*)::int as n from "${this.schema}"._private_jobs`),
    );
    return this.inserted - (r.rows[0]?.n ?? 0);
  }

  async close(): Promise<void> {
    const runners = [...this.runners];
    await Promise.all(runners.map((r) => this.stopRunner(r)));
    const utils = this.utils;
    this.utils = undefined;
    if (utils) await utils.release();
  }

  async teardown(): Promise<void> {
    const client = new pg.Client({ connectionString: graphileConnectionString() });
    await client.connect();
    try {
      await client.query(`drop schema if exists "${this.schema}" cascade`);
    } finally {
      await client.end();
    }
  }
}

const LOCAL_QUEUE_BREAKS_NAMED_QUEUES =
  'n/a in this mode: in graphile-worker 0.17.3 the local queue (size > 1) fetches ' +
  'several jobs of one named queue at once and runs them concurrently ' +
  '(graphile/worker#621, fixed after 0.17.3 by #622); see the no-local-queue mode';
const UNORDERED_ROWS =
  "measured in the local queue mode, graphile-worker's best configuration for " +
  'unordered jobs (this mode is for named queues)';
const namedQueues = 'named queues (queueName = key); one job at a time per queue';

export const graphileFactories: PeerFactory[] = [
  {
    system: 'graphile-worker',
    mode: 'local queue + batched completion',
    workloads: ['bulk', 'latency', 'latency-in-process', 'four-workers', 'sixteen-workers'] satisfies Workload[],
    notes: { ordered: LOCAL_QUEUE_BREAKS_NAMED_QUEUES, 'deep-lane': LOCAL_QUEUE_BREAKS_NAMED_QUEUES },
    ordersByKey: false,
    create: (ns) => new GraphileAdapter(ns, 'tuned'),
  },
  {
    system: 'graphile-worker',
    mode: 'batched completion, no local queue',
    workloads: ['ordered', 'deep-lane', 'latency', 'latency-in-process'] satisfies Workload[],
    notes: {
      bulk: UNORDERED_ROWS,
      'four-workers': UNORDERED_ROWS,
      'sixteen-workers': UNORDERED_ROWS,
      ordered: namedQueues,
      'deep-lane': namedQueues,
    },
    ordersByKey: true,
    create: (ns) => new GraphileAdapter(ns, 'named queues'),
  },
];
