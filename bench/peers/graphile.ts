/**
 * graphile-worker (0.17.x) adapters for the side-by-side benchmark (issue 5).
 *
 * Two modes, same schema / task / enqueue path; they differ only in how the
 * worker pool fetches and completes jobs:
 *
 *  - 'defaults': `run({ connectionString, schema, concurrency, taskList,
 *    noHandleSignals: true })`: one `get_job` round trip per job per worker,
 *    one completion statement per job, LISTEN "jobs:insert" wake-ups plus the
 *    default 2 s poll, default pool size (10).
 *
 *  - 'local queue + batched completion': the options graphile-worker's own
 *    performance page and perf test use (cited at tunedPreset() below).
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
 * graphile-worker deletes a job when it completes, so completedCount() is
 * `undefined`.
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

/**
 * graphile-worker logs one INFO line per completed job ("Completed task …
 * with success") unless NO_LOG_SUCCESS is set when the module loads; its own
 * perf test sets NO_LOG_SUCCESS=1. Per-job console output would measure the
 * terminal, not the queue, so both modes drop INFO/DEBUG and keep warnings
 * and errors. The one warning every 'defaults' run would print (pool 10 <
 * concurrency 32: that *is* the default being measured) is dropped too.
 */
const quietLogger = new Logger(() => (level, message) => {
  const l = String(level);
  if (l !== 'error' && l !== 'warning') return;
  if (/^WARNING: having maxPoolSize \(\d+\) smaller than concurrency/.test(message)) return;
  console.error(`[graphile-worker ${l}] ${message}`);
});

/** ns.id is documented [a-z0-9]; checked here because it becomes an SQL identifier. */
function schemaFor(ns: Namespace): string {
  if (!/^[a-z0-9]{1,50}$/.test(ns.id)) throw new Error(`graphile peer: namespace id must be [a-z0-9]{1,50}, got ${JSON.stringify(ns.id)}`);
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
  const p: { n: number; key?: string; seq?: number; t?: number } = { n: job.n };
  if (job.key !== undefined) p.key = job.key;
  if (job.seq !== undefined) p.seq = job.seq;
  if (job.t !== undefined) p.t = job.t;
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

type Mode = 'defaults' | 'tuned';

class GraphileAdapter implements PeerAdapter {
  private readonly schema: string;
  private utils: WorkerUtils | undefined;
  private readonly runners = new Set<Runner>();

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
      await utils.addJobs(specs);
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
    await utils.withPgClient((client) => client.query(ADD_JOBS_SQL(this.schema), [JSON.stringify(rows)]));
  }

  async enqueueOne(job: BenchJob): Promise<void> {
    const utils = this.requireUtils();
    await utils.addJob(TASK, payloadOf(job), job.key === undefined ? {} : { queueName: job.key });
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
      ...(this.mode === 'tuned' ? { preset: tunedPreset(concurrency) } : {}),
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

  /** runner.stop(): graceful shutdown (waits for in-flight jobs, flushes batched completions, returns local-queue jobs) and ends the runner's pool. */
  private async stopRunner(runner: Runner): Promise<void> {
    if (!this.runners.delete(runner)) return;
    await runner.stop();
    await runner.promise;
  }

  async completedCount(): Promise<number | undefined> {
    return undefined; // completed jobs are deleted by graphile-worker
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

const orderedNote = 'named queues (queueName = key); one job at a time per queue';
const completedNote = 'graphile-worker deletes completed jobs: no completed count';

export const graphileFactories: PeerFactory[] = [
  {
    system: 'graphile-worker',
    mode: 'defaults',
    workloads: ['bulk', 'latency', 'ordered', 'four-workers', 'deep-lane'] satisfies Workload[],
    notes: {
      bulk: completedNote,
      ordered: orderedNote,
      'deep-lane': orderedNote,
      'sixteen-workers': 'run in the tuned mode only (the issue asks for lanewake, BullMQ and graphile-worker tuned)',
    },
    ordersByKey: true,
    create: (ns) => new GraphileAdapter(ns, 'defaults'),
  },
  {
    system: 'graphile-worker',
    mode: 'local queue + batched completion',
    workloads: ['bulk', 'latency', 'four-workers', 'sixteen-workers'] satisfies Workload[],
    notes: {
      bulk: completedNote,
      ordered:
        'n/a: in graphile-worker 0.17.3 the local queue (size > 1) fetches several jobs of one named queue at once and runs them concurrently (graphile/worker#621, fixed after 0.17.3 by #622)',
      'deep-lane':
        'n/a: named queues are not serial with the local queue in 0.17.3 (graphile/worker#621)',
    },
    ordersByKey: false,
    create: (ns) => new GraphileAdapter(ns, 'tuned'),
  },
];
