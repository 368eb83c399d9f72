/**
 * graphile-worker 0.17 as a peer of the side-by-side benchmark, in two modes of its documented performance
 * configuration (tunedPreset()): with the local queue for the unordered rows, without it for the ordered ones
 * (in 0.17.3 the local queue runs several jobs of one named queue at once, graphile/worker#621). A namespace is
 * the schema `gw_<ns.id>`. A keyed job gets `queueName: key` (named queues run one job at a time). graphile-worker
 * deletes a job when it records its completion, so completedCount() is rows inserted less rows left.
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

const TASK = 'bench';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * The perf test's configuration (graphile/worker perfTest/graphile.config.js, a superset of
 * worker.graphile.org/docs/performance), with maxPoolSize = concurrency + 1 as there.
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

/** One INFO line per completed job would measure the terminal: warnings and errors only, kept for the result. */
const quietLogger = new Logger(() => (level, message) => {
  const l = String(level);
  if (l !== 'error' && l !== 'warning') return;
  recordWarning(`graphile-worker ${l}`, message);
});

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
 * add_jobs stamps a call's jobs with one now(), and a named queue runs by (priority, run_at) only, so keyed jobs
 * of one batch would tie; each gets now() less (count - i) µs: runnable at once, in array order, after every
 * earlier batch. Through SQL because Date has only ms.
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
    this.schema = nsName('gw_', ns);
  }

  private baseOptions(): RunnerOptions {
    return { connectionString: PG_URL, schema: this.schema, logger: quietLogger };
  }

  async setup(): Promise<void> {
    // Once, in the parent, so worker children find the schema current.
    await runMigrations(this.baseOptions());
  }

  async connect(): Promise<void> {
    if (this.utils) return;
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
    // Ready = a NOTIFY on "jobs:insert" has reached this pool. The probe's {"count":0} wakes no worker.
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
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    try {
      await c.query(sql);
    } finally {
      await c.end();
    }
  }

  /** Graceful: waits for jobs in flight, flushes batched completions, returns local-queue jobs. */
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
    const client = new pg.Client({ connectionString: PG_URL });
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
