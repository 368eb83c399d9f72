/**
 * The production shape at a steady rate (docs/BENCHMARKS.md, "The production shape at a steady rate"): a producer in
 * its own process (bench/lanewake-child.mjs steady-producer) enqueues single laned items at `--rate` a second for
 * `--seconds`, `--workers` worker processes × `--concurrency` (bench/lanewake-child.mjs steady-worker) run them,
 * each handler writing one effect in ctx.transaction. Per run: enqueue→start p50/p90/p99 (both stamps on
 * CLOCK_MONOTONIC, which every process of the machine shares), how the jobs reached a consumer (offer, lane
 * successor, claim round), the statements over 100 ms (the server's slow log, bench/steady-server.ts), lock waits
 * and retries, and the CPU per job.
 *
 *   npx tsx bench/run.ts steady --server tidb --txn optimistic --lanes 0 --workers 1 --seconds 5 --runs 3   # A
 *   npx tsx bench/run.ts steady --redis cluster     # a local 6-node Redis Cluster, started for the run
 *   npx tsx bench/run.ts steady --backlog 10000     # C: N laned items enqueued ahead, then run (3 workers)
 *   (--no-build: use dist/ as it is)
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { RowDataPacket } from 'mysql2/promise';
import { Ledger } from '../../src/ledger/ledger.js';
import { deleteKeys } from '../../test/support/engine.js';
import { startRedisCluster } from '../../test/support/redis-cluster.js';
import { lockFigures, slowStatements, steadyChild, steadyServer, TidbLockWaitSampler } from '../steady-server.js';
import { childMessage, cliFlag, createBenchDatabase, fmt, median, minMax, onCleanup, percentile } from '../support.js';
import { buildDist, serverCpuSecondsOf, withAdmin } from '../support.js';
import { defineWorkload, numFlag } from '../workload.js';

const { server, txn, serverUrl } = steadyServer();
let redisUrl = cliFlag('--redis') ?? 'redis://127.0.0.1:6379';
const RATE = numFlag('--rate', 200);
const SECONDS = numFlag('--seconds', 30);
const BACKLOG = numFlag('--backlog', 0);
const LANES = numFlag('--lanes', BACKLOG > 0 ? 300 : 100);
const WORKERS = numFlag('--workers', BACKLOG > 0 ? 3 : 2);
const CONCURRENCY = numFlag('--concurrency', 16);
const QUEUE = 'steady';

interface WorkerFigures {
  startsUs: number[];
  /** Jobs that started over 200 ms after their enqueue, up to 20. */
  late: number;
  completed: number;
  claimedByRounds: number;
  handedOver: number;
  claimedWithCompletion: number;
  conflictRetries: Record<string, number>;
  cpuMs: number;
}
/** A run's figures, by `name (unit)`. */
type Figures = Record<string, number>;

/** A fresh database with the effects table, and the worker processes on it. */
async function prepare(
  prefix: string,
): Promise<{ db: string; drop: () => Promise<void>; env: Record<string, string> }> {
  const db = await createBenchDatabase(prefix, serverUrl);
  const keyPrefix = `${prefix}:${randomBytes(4).toString('hex')}:`;
  onCleanup(() => (redisUrl.startsWith('redis://') ? deleteKeys(redisUrl, keyPrefix) : Promise.resolve()));
  const setup = new Ledger({ url: db.url, poolSize: 2 });
  await setup.migrate();
  await setup.close();
  const effects =
    `CREATE TABLE \`${db.name}\`.effects ` +
    '(item_id VARCHAR(32) PRIMARY KEY, lane VARCHAR(255), written_at DATETIME(6))';
  await withAdmin((c) => c.query(effects), serverUrl);
  const env = { LW_DATABASE_URL: db.url, LW_REDIS_URL: redisUrl, LW_KEY_PREFIX: keyPrefix, LW_QUEUE: QUEUE };
  return { db: db.name, drop: db.drop, env: { ...env, ...(server === 'tidb' ? { LW_TIDB_TXN_MODE: txn } : {}) } };
}

const startWorkers = (env: Record<string, string>): ChildProcess[] =>
  Array.from({ length: WORKERS }, () => steadyChild('steady-worker', { ...env, LW_CONCURRENCY: String(CONCURRENCY) }));

const stopWorkers = (workers: readonly ChildProcess[]): Promise<WorkerFigures[]> =>
  Promise.all(
    workers.map((w) => {
      const f = childMessage<WorkerFigures>(w, 'figures');
      w.send({ type: 'stop' });
      return f;
    }),
  );

/** Waits until every job's effect row (written with its completion) is there. */
async function effectsReach(db: string, jobs: number, timeoutS: number): Promise<void> {
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    const query = `SELECT COUNT(*) AS n FROM \`${db}\`.effects`;
    const [rows] = await withAdmin((c) => c.query<RowDataPacket[]>(query), serverUrl);
    if (Number(rows[0]?.n) >= jobs) return;
    if (Date.now() > deadline) throw new Error(`only ${rows[0]?.n} of ${jobs} jobs ran within ${timeoutS} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const serverUs = (before: number | undefined, jobs: number): number => {
  const after = serverCpuSecondsOf(serverUrl);
  return before !== undefined && after !== undefined ? ((after - before) * 1e6) / jobs : Number.NaN;
};

/** C: a backlog over many lanes, enqueued ahead in batches of 500, then run by the workers. */
async function backlogRun(): Promise<Figures> {
  const { db, drop, env } = await prepare('lwlb');
  const mode = server === 'tidb' ? { tidbTxnMode: txn as 'pessimistic' | 'optimistic' } : {};
  const ledger = new Ledger({ url: env.LW_DATABASE_URL!, poolSize: 4, ...mode });
  const [from, t0] = [new Date(), performance.now()];
  for (let i = 0; i < BACKLOG; i += 500) {
    const items = Array.from({ length: Math.min(500, BACKLOG - i) }, (_, k) => ({
      ...{ queue: QUEUE, type: 'job', lane: `lane-${(i + k) % LANES}` },
      payload: { k: i + k, t: '0' },
    }));
    await ledger.enqueueMany(items);
  }
  const enqueueS = (performance.now() - t0) / 1000;
  await ledger.close();
  const workers = startWorkers(env);
  const [t1, cpu0] = [performance.now(), serverCpuSecondsOf(serverUrl)];
  await Promise.all(workers.map((w) => childMessage(w, 'ready')));
  await effectsReach(db, BACKLOG, 600);
  const processS = (performance.now() - t1) / 1000;
  const cpu = serverUs(cpu0, BACKLOG);
  const slow = await slowStatements(server, serverUrl, db, from, new Date());
  await stopWorkers(workers);
  await drop();
  return {
    [`enqueue ${fmt(BACKLOG)} (s)`]: enqueueS,
    "processing, the workers' start included (jobs/s)": BACKLOG / processS,
    'SQL server CPU (µs/job)': cpu,
    'statements > 100 ms': slow.reduce((n, x) => n + x.count, 0),
  };
}

/** A and B: single enqueues at a steady rate from the producer process. */
async function steadyRun(): Promise<Figures> {
  const { db, drop, env } = await prepare('lwst');
  const workers = startWorkers(env);
  await Promise.all(workers.map((w) => childMessage(w, 'ready')));
  const jobs = RATE * SECONDS;
  const producer = steadyChild('steady-producer', {
    ...{ ...env, LW_JOBS: String(jobs), LW_RATE: String(RATE), LW_LANES: String(LANES) },
  });
  await childMessage(producer, 'ready');
  const from = new Date();
  const before = await lockFigures(server, serverUrl, db);
  const sampler = server === 'tidb' ? new TidbLockWaitSampler(serverUrl) : undefined;
  sampler?.start();
  const cpu0 = serverCpuSecondsOf(serverUrl);
  const done = childMessage<{ enqueueUs: number[]; failed: number; cpuMs: number }>(producer, 'done');
  producer.send({ type: 'go' });
  const sent = await done;
  if (sent.failed > 0) throw new Error(`${sent.failed} enqueues failed`);
  await effectsReach(db, jobs, 120);
  const [to, cpu] = [new Date(), serverUs(cpu0, jobs)];
  const after = await lockFigures(server, serverUrl, db);
  const sampled = await sampler?.stop();
  const figures = await stopWorkers(workers);
  const starts = figures.flatMap((f) => f.startsUs).map((us) => us / 1000);
  if (starts.length !== jobs) throw new Error(`${starts.length} starts for ${jobs} jobs (one ran twice, or never)`);
  const sum = (pick: (f: WorkerFigures) => number): number => figures.reduce((n, f) => n + pick(f), 0);
  if (sum((f) => f.completed) !== jobs) throw new Error(`${sum((f) => f.completed)} completions for ${jobs} jobs`);
  const slow = await slowStatements(server, serverUrl, db, from, to);
  await drop();
  return {
    'enqueue→start p50 (ms)': percentile(starts, 50),
    'p90 (ms)': percentile(starts, 90),
    'p99 (ms)': percentile(starts, 99),
    'max (ms)': Math.max(...starts),
    'enqueue p50 (ms)': percentile(sent.enqueueUs, 50) / 1000,
    [`by offer (of ${fmt(jobs)})`]: sum((f) => f.handedOver),
    'as lane successors': sum((f) => f.claimedWithCompletion),
    'by claim rounds': sum((f) => f.claimedByRounds),
    'started over 200 ms late': sum((f) => f.late),
    'statements > 100 ms': slow.reduce((n, x) => n + x.count, 0),
    'lock waits/job': (sampled?.waits ?? after.lockWaits - before.lockWaits) / jobs,
    deadlocks: after.deadlocks - before.deadlocks,
    'statement retries/job': (after.statementRetries - before.statementRetries) / jobs,
    'ledger conflict retries/job': sum((f) => Object.values(f.conflictRetries).reduce((a, b) => a + b, 0)) / jobs,
    'SQL server CPU (µs/job)': cpu,
    'workers CPU (µs/job)': (sum((f) => f.cpuMs) * 1000) / jobs,
    'producer CPU (µs/job)': (sent.cpuMs * 1000) / jobs,
  };
}

const figure = (v: number): string => fmt(v, Math.abs(v) < 10 && !Number.isInteger(v) ? 3 : 1);
const shape = BACKLOG > 0 ? `C: ${fmt(BACKLOG)} items ahead` : `${RATE}/s for ${SECONDS} s`;

export default defineWorkload<'run', Figures>({
  about: 'the production shape: single enqueues at a steady rate, or a backlog, run by worker processes',
  variants: ['run'],
  label: () => `${server}${server === 'tidb' ? ` ${txn}` : ''}, ${shape}, ${LANES} lanes, ${WORKERS} × ${CONCURRENCY}`,
  runs: 1,
  setup: async () => {
    if (redisUrl === 'cluster') {
      const cluster = await startRedisCluster();
      onCleanup(() => cluster.stop());
      redisUrl = cluster.url;
    }
    buildDist();
  },
  measure: () => (BACKLOG > 0 ? backlogRun() : steadyRun()),
  line: (_, r) =>
    Object.entries(r)
      .map(([k, v]) => `${k} ${figure(v)}`)
      .join('; '),
  report: (of, runs) => [
    {
      title:
        `${server}${server === 'tidb' ? ` ${txn}` : ''}, ` +
        `${redisUrl.includes('cluster') ? 'Redis Cluster' : 'one Redis'}, ${shape}, ${LANES} lanes, ` +
        `${WORKERS} workers × ${CONCURRENCY}: median of ${runs} run(s)`,
      headers: ['figure', 'median', 'min–max'],
      rows: Object.keys(of('run')[0] ?? {}).map((k) => {
        const values = of('run').map((r) => r[k] ?? Number.NaN);
        const { min, max } = minMax(values);
        return [k, figure(median(values)), `${figure(min)}–${figure(max)}`];
      }),
      align: ['left', 'right', 'right'],
    },
  ],
});
