/**
 * The production shape at a steady rate (issue 22): a producer in its own
 * process enqueues single laned items at a steady rate, two worker
 * processes run them, each handler writing one effect in ctx.transaction.
 * Reported per run: enqueue→start p50/p90/p99 (both stamps on
 * CLOCK_MONOTONIC, which every process of the machine shares), how the jobs
 * reached a consumer (offer, lane successor, claim round), the statements
 * that took over 100 ms (the server's slow log), lock waits and statement
 * retries per job, and conflicts the ledger retried per job.
 *
 *   npx tsx bench/steady.ts                                   # MariaDB, 200/s for 30 s
 *   npx tsx bench/steady.ts --server tidb --txn optimistic
 *   npx tsx bench/steady.ts --server mariadb --redis cluster      # a local 6-node Redis Cluster, started for the run
 *   npx tsx bench/steady.ts --server mariadb --redis redis+cluster://127.0.0.1:7000,127.0.0.1:7001
 *   npx tsx bench/steady.ts --rate 200 --seconds 60 --lanes 100 --workers 2 --concurrency 16 --runs 3
 *   npx tsx bench/steady.ts --backlog 10000 --server tidb   # C: a backlog over many lanes (below)
 *   (--no-build: use dist/ as it is)
 *
 * Servers: LANEWAKE_BENCH_MYSQL_URL (MariaDB, default mysql://root@127.0.0.1:3306) and
 * LANEWAKE_BENCH_TIDB_URL (default mysql://root@127.0.0.1:4000; scripts/tidb.sh start).
 * The slow-log threshold is set to 100 ms for the run and put back after.
 * Each run has a database and a Redis key prefix of its own, removed after.
 *
 * `--backlog N` (C): instead of the steady producer, this process enqueues N laned items (over 300 lanes, unless
 * `--lanes`) in batches of 500 (`enqueueMany`), then the workers (3 unless `--workers`) run them. Per run: how long
 * the enqueue took, the processing rate from the workers' start to the last effect, the SQL server's CPU per job
 * and the statements over 100 ms.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { RowDataPacket } from 'mysql2/promise';
import { Ledger } from '../src/ledger/ledger.js';
import { deleteKeys } from '../test/support/engine.js';
import { startRedisCluster } from '../test/support/redis-cluster.js';
import {
  buildDist,
  steadyChild,
  steadyServer,
  slowStatements,
  lockFigures,
  TidbLockWaitSampler,
  type LockFigures,
  type SlowStatement,
} from './steady-server.js';
import {
  type BenchDatabase,
  childMessage,
  cliFlag,
  createBenchDatabase,
  median,
  onCleanup,
  percentile,
  progress,
  runBenchmark,
  serverCpuSecondsOf,
  withAdmin,
} from './support.js';

const args = process.argv.slice(2);
const flag = (name: string, dflt: string): string => cliFlag(`--${name}`, args) ?? dflt;
const { server, txn, serverUrl } = steadyServer(args);
/** `--redis cluster` starts a local 6-node Redis Cluster (3 masters, 3 replicas) for the run, as the test suites do. */
const redisFlag = flag('redis', 'redis://127.0.0.1:6379');
let redisUrl = redisFlag;
const RATE = Number(flag('rate', '200'));
const SECONDS = Number(flag('seconds', '30'));
const BACKLOG = Number(flag('backlog', '0'));
const LANES = Number(flag('lanes', BACKLOG > 0 ? '300' : '100'));
const WORKERS = Number(flag('workers', BACKLOG > 0 ? '3' : '2'));
const CONCURRENCY = Number(flag('concurrency', '16'));
const RUNS = Number(flag('runs', '1'));
const QUEUE = 'steady';

interface WorkerFigures {
  startsUs: number[];
  late: { id: string; us: number; attempt: number; wakeReadBeforeStartMs: number | null }[];
  completed: number;
  claimRounds: number;
  claimedByRounds: number;
  handedOver: number;
  handoffsRecovered: number;
  claimedWithCompletion: number;
  offersMade: number;
  conflictRetries: Record<string, number>;
  cpuMs: number;
}

interface RunFigures {
  p50: number;
  p90: number;
  p99: number;
  max: number;
  enqueueP50: number;
  enqueueP99: number;
  enqueueMax: number;
  jobs: number;
  byOffer: number;
  /** Of those, found in the ledger because their handoff never came. */
  recovered: number;
  offersMade: number;
  bySuccessor: number;
  byRound: number;
  conflictsPerJob: number;
  /** CPU per job (µs): the workers together, the producer, the SQL server. */
  cpuUs: { workers: number; producer: number; server: number | undefined };
  slow: SlowStatement[];
  locks: LockFigures;
}

/** A fresh database with the effects table, and the workers' environment; `db` is dropped by the caller. */
async function prepare(prefix: string): Promise<{ db: BenchDatabase; env: Record<string, string> }> {
  const db = await createBenchDatabase(prefix, serverUrl);
  const keyPrefix = `${prefix}:${randomBytes(4).toString('hex')}:`;
  onCleanup(() => (redisUrl.startsWith('redis://') ? deleteKeys(redisUrl, keyPrefix) : Promise.resolve()));
  const setup = new Ledger({ url: db.url, poolSize: 2 });
  await setup.migrate();
  await setup.close();
  await withAdmin(
    (c) =>
      c.query(
        `CREATE TABLE \`${db.name}\`.effects (item_id VARCHAR(32) PRIMARY KEY, lane ` +
          `VARCHAR(255), written_at DATETIME(6))`,
      ),
    serverUrl,
  );
  const env = {
    LW_DATABASE_URL: db.url,
    LW_REDIS_URL: redisUrl,
    LW_KEY_PREFIX: keyPrefix,
    LW_QUEUE: QUEUE,
    ...(server === 'tidb' ? { LW_TIDB_TXN_MODE: txn } : {}),
  };
  return { db, env };
}

const startWorkers = (env: Record<string, string>): ChildProcess[] =>
  Array.from({ length: WORKERS }, () =>
    steadyChild('./steady-worker.mjs', { ...env, LW_CONCURRENCY: String(CONCURRENCY) }),
  );

async function stopWorkers(workers: readonly ChildProcess[]): Promise<WorkerFigures[]> {
  return Promise.all(
    workers.map((w) => {
      const f = childMessage<WorkerFigures>(w, 'figures');
      w.send({ type: 'stop' });
      return f;
    }),
  );
}

/** Waits until every job's effect row (written with its completion) is there. */
async function effectsReach(db: string, jobs: number, timeoutS: number): Promise<void> {
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    const [rows] = await withAdmin(
      (c) => c.query<RowDataPacket[]>(`SELECT COUNT(*) AS n FROM \`${db}\`.effects`),
      serverUrl,
    );
    if (Number(rows[0]?.n) >= jobs) return;
    if (Date.now() > deadline) throw new Error(`only ${rows[0]?.n} of ${jobs} jobs ran within ${timeoutS} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const cpuPerJob = (before: number | undefined, after: number | undefined, jobs: number): number | undefined =>
  before !== undefined && after !== undefined ? ((after - before) * 1e6) / jobs : undefined;

interface BacklogFigures {
  enqueueS: number;
  processS: number;
  jobsPerS: number;
  serverCpuUs: number | undefined;
  slow: number;
}

/** C: a backlog over many lanes, enqueued ahead, then run by the workers. */
async function backlogRun(): Promise<BacklogFigures> {
  const { db, env } = await prepare('lwlb');
  const mode = server === 'tidb' ? { tidbTxnMode: txn as 'pessimistic' | 'optimistic' } : {};
  const ledger = new Ledger({ url: db.url, poolSize: 4, ...mode });
  const from = new Date();
  const t0 = performance.now();
  for (let i = 0; i < BACKLOG; i += 500) {
    const items = Array.from({ length: Math.min(500, BACKLOG - i) }, (_, k) => ({
      queue: QUEUE,
      type: 'job',
      lane: `lane-${(i + k) % LANES}`,
      payload: { k: i + k, t: '0' },
    }));
    await ledger.enqueueMany(items);
  }
  const enqueueS = (performance.now() - t0) / 1000;
  await ledger.close();
  const workers = startWorkers(env);
  const t1 = performance.now();
  const cpuBefore = serverCpuSecondsOf(serverUrl);
  await Promise.all(workers.map((w) => childMessage(w, 'ready')));
  await effectsReach(db.name, BACKLOG, 600);
  const processS = (performance.now() - t1) / 1000;
  const serverCpuUs = cpuPerJob(cpuBefore, serverCpuSecondsOf(serverUrl), BACKLOG);
  const slow = await slowStatements(server, serverUrl, db.name, from, new Date());
  await stopWorkers(workers);
  await db.drop();
  const slowCount = slow.reduce((n, x) => n + x.count, 0);
  return { enqueueS, processS, jobsPerS: BACKLOG / processS, serverCpuUs, slow: slowCount };
}

async function oneRun(): Promise<RunFigures> {
  const { db, env } = await prepare('lwst');
  const workers = startWorkers(env);
  await Promise.all(workers.map((w) => childMessage(w, 'ready')));
  const jobs = RATE * SECONDS;
  const producer = steadyChild('./steady-producer.mjs', {
    ...env,
    LW_JOBS: String(jobs),
    LW_RATE: String(RATE),
    LW_LANES: String(LANES),
  });
  await childMessage(producer, 'ready');
  const from = new Date();
  const before = await lockFigures(server, serverUrl, db.name);
  const sampler = server === 'tidb' ? new TidbLockWaitSampler(serverUrl) : undefined;
  sampler?.start();
  const serverCpuBefore = serverCpuSecondsOf(serverUrl);
  const done = childMessage<{ enqueueUs: number[]; failed: number; cpuMs: number }>(producer, 'done');
  producer.send({ type: 'go' });
  const sent = await done;
  if (sent.failed > 0) throw new Error(`${sent.failed} enqueues failed`);
  await effectsReach(db.name, jobs, 120);
  const to = new Date();
  const serverCpuAfter = serverCpuSecondsOf(serverUrl);
  const after = await lockFigures(server, serverUrl, db.name);
  const sampled = await sampler?.stop();
  const figures = await stopWorkers(workers);
  const starts = figures.flatMap((f) => f.startsUs).map((us) => us / 1000);
  if (starts.length !== jobs)
    throw new Error(`${starts.length} starts recorded for ${jobs} jobs (a job ran twice, or not at all)`);
  const completed = figures.reduce((n, f) => n + f.completed, 0);
  if (completed !== jobs) throw new Error(`${completed} completions for ${jobs} jobs`);
  const conflicts = figures.reduce((n, f) => n + Object.values(f.conflictRetries).reduce((a, b) => a + b, 0), 0);
  const slow = await slowStatements(server, serverUrl, db.name, from, to);
  const late = figures.flatMap((f) => f.late);
  if (late.length > 0) {
    // Why a job started late: its attempt history (a release, an expired lease) and its rows' times.
    const ids = late.map((l) => `'${l.id}'`).join(', ');
    const [history] = await withAdmin(
      (c) =>
        c.query<RowDataPacket[]>(
          `SELECT item_id, outcome, error FROM \`${db.name}\`.lw_attempts WHERE item_id IN (${ids})`,
        ),
      serverUrl,
    );
    const [rows] = await withAdmin(
      (c) =>
        c.query<RowDataPacket[]>(
          `SELECT id, TIMESTAMPDIFF(MICROSECOND, created_at, started_at) AS claim_us, ` +
            `lease_token FROM \`${db.name}\`.lw_items WHERE id IN (${ids})`,
        ),
      serverUrl,
    );
    for (const l of late.slice(0, 5)) {
      const h = history.filter((r) => r.item_id === l.id).map((r) => `${String(r.outcome)} (${String(r.error ?? '')})`);
      const row = rows.find((r) => r.id === l.id);
      console.log(
        `    late start: ${l.id} after ${(l.us / 1000).toFixed(0)} ms, attempt ` +
          `${l.attempt}, claimed ${(Number(row?.claim_us) / 1000).toFixed(0)} ms after its ` +
          `insert; history: ${h.join('; ') || 'none'}; ` +
          (l.wakeReadBeforeStartMs === null
            ? 'no wake-up read for it'
            : `its wake-up read ${l.wakeReadBeforeStartMs} ms before it started`),
      );
    }
  }
  await db.drop();
  return {
    p50: percentile(starts, 50),
    p90: percentile(starts, 90),
    p99: percentile(starts, 99),
    max: Math.max(...starts),
    enqueueP50: percentile(sent.enqueueUs, 50) / 1000,
    enqueueP99: percentile(sent.enqueueUs, 99) / 1000,
    enqueueMax: Math.max(...sent.enqueueUs) / 1000,
    jobs,
    byOffer: figures.reduce((n, f) => n + f.handedOver, 0),
    recovered: figures.reduce((n, f) => n + f.handoffsRecovered, 0),
    offersMade: figures.reduce((n, f) => n + f.offersMade, 0),
    bySuccessor: figures.reduce((n, f) => n + f.claimedWithCompletion, 0),
    byRound: figures.reduce((n, f) => n + f.claimedByRounds, 0),
    conflictsPerJob: conflicts / jobs,
    cpuUs: {
      workers: (figures.reduce((n, f) => n + f.cpuMs, 0) * 1000) / jobs,
      producer: (sent.cpuMs * 1000) / jobs,
      server: cpuPerJob(serverCpuBefore, serverCpuAfter, jobs),
    },
    slow,
    locks: {
      lockWaits: sampled?.waits ?? after.lockWaits - before.lockWaits,
      lockWaitMs: sampled ? sampled.longestLooks * 20 : after.lockWaitMs - before.lockWaitMs,
      deadlocks: after.deadlocks - before.deadlocks,
      statementRetries: after.statementRetries - before.statementRetries,
    },
  };
}

async function backlogMain(): Promise<void> {
  const label = `${server}${server === 'tidb' ? ` ${txn}` : ''}`;
  progress(`${label}: ${BACKLOG} items over ${LANES} lanes, ${WORKERS} workers x ${CONCURRENCY}, ${RUNS} run(s)`);
  const runs: BacklogFigures[] = [];
  for (let r = 0; r < RUNS; r++) {
    const f = await backlogRun();
    runs.push(f);
    console.log(
      `run ${r + 1}: enqueued in ${f.enqueueS.toFixed(2)} s; processed in ${f.processS.toFixed(2)} s ` +
        `(${f.jobsPerS.toFixed(0)} jobs/s, workers' start included); server CPU ` +
        `${f.serverCpuUs?.toFixed(0) ?? '?'} µs/job; ${f.slow} statements over 100 ms`,
    );
  }
  const m = (pick: (f: BacklogFigures) => number, d = 2): string => median(runs.map(pick)).toFixed(d);
  console.log(`\n${label}, median of ${RUNS}: enqueue ${m((f) => f.enqueueS)} s, ${m((f) => f.jobsPerS, 0)} jobs/s`);
}

runBenchmark(async () => {
  if (redisFlag === 'cluster') {
    progress('starting a local Redis Cluster (6 nodes)');
    const cluster = await startRedisCluster();
    onCleanup(() => cluster.stop());
    redisUrl = cluster.url;
  }
  buildDist(args);
  if (BACKLOG > 0) return backlogMain();
  const label =
    `${server}${server === 'tidb' ? ` ${txn}` : ''}, ` +
    `${redisUrl.startsWith('redis+cluster://') ? 'Redis Cluster' : 'one Redis'}`;
  progress(`${label}: ${RATE}/s for ${SECONDS} s, ${LANES} lanes, ${WORKERS} workers x ${CONCURRENCY}, ${RUNS} run(s)`);
  const runs: RunFigures[] = [];
  for (let r = 0; r < RUNS; r++) {
    const f = await oneRun();
    runs.push(f);
    const ms = (v: number): string => v.toFixed(2);
    console.log(
      `run ${r + 1}: enqueue→start p50 ${ms(f.p50)} p90 ${ms(f.p90)} p99 ${ms(f.p99)} ` +
        `max ${ms(f.max)} ms; enqueue p50 ${ms(f.enqueueP50)} p99 ${ms(f.enqueueP99)} ` +
        `max ${ms(f.enqueueMax)} ms; ` +
        `${f.byOffer} by offer (${f.offersMade} offers made, ${f.recovered} recovered ` +
        `from the ledger), ${f.bySuccessor} as lane successors, ${f.byRound} by claim ` +
        `rounds; ` +
        `${(f.locks.lockWaits / f.jobs).toFixed(3)} lock waits/job ` +
        `(${server === 'tidb' ? `sampled; the longest seen for ~${f.locks.lockWaitMs}` : f.locks.lockWaitMs} ` +
        `ms), ${f.locks.deadlocks} deadlocks, ` +
        `${(f.locks.statementRetries / f.jobs).toFixed(3)} statement retries/job, ` +
        `${f.conflictsPerJob.toFixed(3)} ledger conflict retries/job; ` +
        `CPU/job: workers ${f.cpuUs.workers.toFixed(0)} µs, producer ` +
        `${f.cpuUs.producer.toFixed(0)} µs, server ${f.cpuUs.server?.toFixed(0) ?? '?'} ` +
        `µs; ${f.slow.length} statements over 100 ms`,
    );
    for (const s of f.slow.slice(0, 8)) console.log(`    ${s.ms.toFixed(0)} ms  x${s.count}  ${s.text}`);
  }
  const m = (pick: (f: RunFigures) => number): string => median(runs.map(pick)).toFixed(2);
  console.log(
    `\n${label}, median of ${RUNS}: p50 ${m((f) => f.p50)} p90 ${m((f) => f.p90)} ` +
      `p99 ${m((f) => f.p99)} ms; slow statements ` +
      `${m((f) => f.slow.reduce((n, s) => n + s.count, 0))}`,
  );
  console.log(
    `JSON ${JSON.stringify({
      label,
      rate: RATE,
      seconds: SECONDS,
      lanes: LANES,
      workers: WORKERS,
      concurrency: CONCURRENCY,
      runs,
    })}`,
  );
});
