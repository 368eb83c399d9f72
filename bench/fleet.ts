/**
 * Many replicas on one machine, as a simulation of a fleet (issue 16 §5).
 *
 *   npm run bench:fleet
 *   npm run bench:fleet -- --runs 3 --jobs 20000 --shapes 32x2,4x16 [--cluster] [--warmup 5000] [--cpu-prof DIR]
 *   npm run bench:fleet -- --keys 1000 --key-limit 3   (the items spread over concurrency keys, limited per key)
 *   npm run bench:fleet -- --keys 1000 --key-limit 3 --paired   (each run drains with keys and without, alternated)
 *
 * Per shape (processes × concurrency; by default 32 × 2 against 4 × 16, the
 * same 64 slots): that many worker processes, each a Consumer of one queue
 * from the compiled package (bench/fleet-worker.mjs), are started and say
 * they are ready. A producer with its own pool and channel then enqueues
 * --jobs no-op items in batches of 500. Measured from the first enqueue:
 * - the first start anywhere, when half and when every replica has started one
 *   (wake spreading: how long until all are busy);
 * - throughput until the ledger counts every item completed;
 * - per replica: items claimed (min / max: no replica starved), claim rounds
 *   and empty claim rounds (a round that won nothing: its picks were all
 *   taken by others) per claimed item, wake entries read per item.
 * With --cluster the wake channel is a local 6-node Redis Cluster
 * (test/support/redis-cluster.ts) instead of the plain Redis.
 *
 * With --keys and --paired, each run of a shape drains twice, with the keys
 * and without, the keyed drain first in odd runs and second in even ones
 * (a server serves the drains of one invocation slower as it runs more: an
 * order kept fixed would favour one side), and the table adds each run's
 * keyed ÷ unkeyed throughput and their median.
 */
import { once } from 'node:events';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { startRedisCluster, type LocalRedisCluster } from '../test/support/redis-cluster.js';
import { completedInLedger, environment } from './workload.js';
import {
  cliFlag,
  cpuSample,
  cpuShare,
  sleep,
  withAdmin,
  fmt,
  median,
  minMax,
  onCleanup,
  percentile,
  printTable,
  progress,
  runBenchmark,
} from './support.js';

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => cliFlag(name, args);
const RUNS = Number(flag('--runs') ?? 3);
const JOBS = Number(flag('--jobs') ?? 20_000);
const SHAPES = (flag('--shapes') ?? '32x2,4x16').split(',').map((s) => {
  const [p, c] = s.split('x').map(Number);
  if (!p || !c) throw new Error(`bad shape '${s}': want processesxconcurrency, e.g. 32x2`);
  return { processes: p, concurrency: c };
});
const CLUSTER = args.includes('--cluster');
/**
 * Items per replica drained before the measured drain, so each process's code is warm (V8 compiles the hot path on
 * first use).
 */
const WARMUP = Number(flag('--warmup') ?? 0);
const CPU_PROF_DIR = flag('--cpu-prof');
/**
 * Items spread round-robin over this many concurrency keys (docs/design/keys.md, Concurrency keys), the queue's limit
 * per
 * key `--key-limit`.
 */
const KEYS = flag('--keys') === undefined ? undefined : Number(flag('--keys'));
const KEY_LIMIT = Number(flag('--key-limit') ?? 3);
const PAIRED = args.includes('--paired');
if (PAIRED && KEYS === undefined)
  throw new Error('--paired compares a keyed drain with an unkeyed one: give --keys too');
const PLAIN_REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const log = createLogger('bench', process.env.LANEWAKE_LOG_LEVEL ?? 'warn');
const WORKER = fileURLToPath(new URL('./fleet-worker.mjs', import.meta.url));

interface WorkerFigures {
  firstStartMs?: number;
  claimed: number;
  completed: number;
  rounds: number;
  emptyRounds: number;
  wakeEntriesRead: number;
  cpuS: number;
}

interface ShapeResult {
  shape: string;
  firstStartMs: number;
  /** When half the replicas had started one. */
  halfBusyMs: number;
  allBusyMs: number;
  jobsS: number;
  claimedMin: number;
  claimedMax: number;
  roundsPerItem: number;
  emptyRoundsPerItem: number;
  wakeEntriesPerItem: number;
  /**
   * Statements the server ran per job (its `Questions` count, every client's: the producer's and this benchmark's
   * polling too).
   */
  statementsPerJob: number;
  /** The worker processes' CPU per job, µs (from each one's ready to its stop). */
  workerUsPerJob: number;
  /** This process's CPU per job over the drain, µs: the producer's enqueues (and the poll for the end). */
  producerUsPerJob: number;
  /** The SQL server's CPU per job, µs, from the first enqueue to the last completion (undefined when not visible). */
  serverUsPerJob: number | undefined;
  /** The whole machine's busy share over the same interval, %. */
  machineBusyPct: number | undefined;
}

const nowMs = (): number => performance.timeOrigin + performance.now();

function startWorker(env: NodeJS.ProcessEnv): {
  child: ChildProcess;
  ready: Promise<void>;
  figures: Promise<WorkerFigures>;
  mark: () => Promise<void>;
} {
  // --cpu-prof DIR: each worker writes a V8 CPU profile there when it exits.
  const prof = CPU_PROF_DIR !== undefined ? ['--cpu-prof', '--cpu-prof-dir', CPU_PROF_DIR] : [];
  const child = spawn(process.execPath, [...prof, WORKER], { env, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  onCleanup(async () => void child.kill('SIGKILL'));
  let onReady: () => void = () => undefined;
  let onFigures: (f: WorkerFigures) => void = () => undefined;
  const ready = new Promise<void>((resolve, reject) => {
    onReady = resolve;
    child.once('exit', (code) => reject(new Error(`fleet worker exited ${code} before it was ready`)));
  });
  const figures = new Promise<WorkerFigures>((resolve) => (onFigures = resolve));
  let onMarked: () => void = () => undefined;
  child.on('message', (m: { type: string } & WorkerFigures) => {
    if (m.type === 'ready') onReady();
    if (m.type === 'marked') onMarked();
    if (m.type === 'figures') onFigures(m);
  });
  const mark = (): Promise<void> =>
    new Promise<void>((resolve) => {
      onMarked = resolve;
      child.send({ type: 'mark' });
    });
  return { child, ready, figures, mark };
}

/** The SQL server's count of statements served so far (`Questions`; one per statement of a multi-statement query). */
async function statementsServed(): Promise<number> {
  return withAdmin(async (c) => {
    const [rows] = await c.query("SHOW GLOBAL STATUS LIKE 'Questions'");
    return Number((rows as { Value: string }[])[0]?.Value ?? 0);
  });
}

async function shape(
  processes: number,
  concurrency: number,
  redisUrl: string,
  keys: number | undefined,
): Promise<ShapeResult> {
  const env = await environment(false);
  const producerLedger = new Ledger({ url: env.url, poolSize: 4 });
  const producerWake = new WakeChannel({ redis: redisUrl, keyPrefix: env.keyPrefix, logger: log });
  const workers: ReturnType<typeof startWorker>[] = [];
  try {
    if (keys !== undefined) await producerLedger.setConcurrencyLimit(env.queue, KEY_LIMIT);
    for (let i = 0; i < processes; i++) {
      workers.push(
        startWorker({
          ...process.env,
          LW_DATABASE_URL: env.url,
          LW_REDIS_URL: redisUrl,
          LW_KEY_PREFIX: env.keyPrefix,
          LW_QUEUE: env.queue,
          LW_CONCURRENCY: String(concurrency),
        }),
      );
    }
    await Promise.all(workers.map((w) => w.ready));
    await producerLedger.capabilities();
    const producer = new Producer({ ledger: producerLedger, wake: producerWake });
    const enqueue = async (n: number, from: number): Promise<void> => {
      for (let i = 0; i < n; i += 500) {
        const keyed = (seq: number): { concurrencyKey?: string } =>
          keys !== undefined ? { concurrencyKey: `tenant:${seq % keys}` } : {};
        await producer.enqueueMany(
          Array.from({ length: Math.min(500, n - i) }, (_, k) => ({
            queue: env.queue,
            type: 'noop',
            payload: { n: from + i + k },
            ...keyed(from + i + k),
          })),
        );
      }
    };
    const completedReach = async (n: number): Promise<void> => {
      const deadline = Date.now() + 300_000;
      for (;;) {
        const completed = await completedInLedger(env);
        if (completed >= n) return;
        if (Date.now() > deadline) throw new Error(`fleet: ${completed} of ${n} completed after 300 s`);
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const warm = WARMUP * processes;
    if (warm > 0) {
      await enqueue(warm, JOBS);
      await completedReach(warm);
      await Promise.all(workers.map((w) => w.mark()));
    }
    const q0 = await statementsServed();
    const cpu0 = cpuSample();
    const own0 = process.cpuUsage();
    const t0 = nowMs();
    await enqueue(JOBS, 0);
    await completedReach(JOBS + warm);
    const tDone = nowMs();
    const own = process.cpuUsage(own0);
    const cpu1 = cpuSample();
    const q1 = await statementsServed();
    for (const w of workers) w.child.send({ type: 'stop' });
    const figures = await Promise.all(workers.map((w) => w.figures));
    // Each exits on its own once it has sent its figures (and written its CPU profile, with --cpu-prof).
    await Promise.all(
      workers.map((w) =>
        w.child.exitCode !== null ? undefined : Promise.race([once(w.child, 'exit'), sleep(10_000)]),
      ),
    );
    const completed = figures.reduce((n, f) => n + f.completed, 0);
    if (completed !== JOBS)
      throw new Error(`verification failed: the replicas report ${completed} completions of ${JOBS}`);
    const starts = figures.map((f) => f.firstStartMs ?? Number.POSITIVE_INFINITY);
    const claimed = figures.map((f) => f.claimed);
    const sum = (f: (x: WorkerFigures) => number): number => figures.reduce((n, x) => n + f(x), 0);
    return {
      shape: `${processes} × ${concurrency}${PAIRED ? (keys !== undefined ? ', keyed' : ', unkeyed') : ''}`,
      firstStartMs: Math.min(...starts) - t0,
      halfBusyMs: percentile(starts, 50) - t0,
      allBusyMs: Math.max(...starts) - t0,
      jobsS: (JOBS / (tDone - t0)) * 1000,
      claimedMin: Math.min(...claimed),
      claimedMax: Math.max(...claimed),
      roundsPerItem: sum((f) => f.rounds) / JOBS,
      emptyRoundsPerItem: sum((f) => f.emptyRounds) / JOBS,
      wakeEntriesPerItem: sum((f) => f.wakeEntriesRead) / JOBS,
      workerUsPerJob: (sum((f) => f.cpuS) / JOBS) * 1e6,
      producerUsPerJob: (own.user + own.system) / JOBS,
      statementsPerJob: (q1 - q0) / JOBS,
      serverUsPerJob:
        cpu0.server !== undefined && cpu1.server !== undefined ? ((cpu1.server - cpu0.server) / JOBS) * 1e6 : undefined,
      machineBusyPct: cpuShare(cpu0, cpu1).machineBusyPct,
    };
  } finally {
    for (const w of workers) if (w.child.exitCode === null) w.child.kill('SIGKILL');
    await producerWake.close();
    await producerLedger.close();
    const cleanup = new WakeChannel({ redis: redisUrl, keyPrefix: env.keyPrefix, logger: log });
    await cleanup.dropKeys().catch(() => undefined);
    await cleanup.close();
    await env.close();
  }
}

async function main(): Promise<void> {
  progress('building dist/ for the worker processes');
  execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
  let cluster: LocalRedisCluster | undefined;
  if (CLUSTER) {
    progress('starting a local 6-node Redis Cluster');
    cluster = await startRedisCluster();
    onCleanup(() => cluster!.stop());
  }
  const redisUrl = cluster?.url ?? PLAIN_REDIS_URL;
  const results = new Map<string, ShapeResult[]>();
  /** Per shape, with --paired: each run's keyed ÷ unkeyed throughput. */
  const ratios = new Map<string, number[]>();
  for (let run = 1; run <= RUNS; run++) {
    for (const s of SHAPES) {
      // Paired: the keyed drain first in odd runs, second in even ones.
      const drains = !PAIRED ? [KEYS] : run % 2 === 1 ? [KEYS, undefined] : [undefined, KEYS];
      const jobsS = { keyed: Number.NaN, unkeyed: Number.NaN };
      for (const keys of drains) {
        progress(
          `run ${run}/${RUNS}: ${s.processes} processes × concurrency ${s.concurrency}, ` +
            `${JOBS} ` +
            `items${keys !== undefined ? `, ${keys} keys` : ''}${cluster ? ', Redis Cluster' : ''}`,
        );
        const r = await shape(s.processes, s.concurrency, redisUrl, keys);
        progress(
          `  all busy ${fmt(r.allBusyMs, 1)} ms, ${fmt(r.jobsS)} jobs/s, claimed per ` +
            `replica ${r.claimedMin}–${r.claimedMax}`,
        );
        results.set(r.shape, [...(results.get(r.shape) ?? []), r]);
        jobsS[keys !== undefined ? 'keyed' : 'unkeyed'] = r.jobsS;
      }
      if (PAIRED) {
        const name = `${s.processes} × ${s.concurrency}`;
        const ratio = jobsS.keyed / jobsS.unkeyed;
        ratios.set(name, [...(ratios.get(name) ?? []), ratio]);
        progress(`  keyed ÷ unkeyed ${fmt(ratio * 100)}%`);
      }
    }
  }
  const rows = [...results].map(([name, rs]) => {
    const m = (f: (r: ShapeResult) => number): number => median(rs.map(f));
    const jobs = minMax(rs.map((r) => r.jobsS));
    return {
      shape: name,
      firstStartMs: m((r) => r.firstStartMs),
      halfBusyMs: m((r) => r.halfBusyMs),
      allBusyMs: m((r) => r.allBusyMs),
      jobsS: m((r) => r.jobsS),
      jobsSMin: jobs.min,
      jobsSMax: jobs.max,
      claimedMin: m((r) => r.claimedMin),
      claimedMax: m((r) => r.claimedMax),
      roundsPerItem: m((r) => r.roundsPerItem),
      emptyRoundsPerItem: m((r) => r.emptyRoundsPerItem),
      wakeEntriesPerItem: m((r) => r.wakeEntriesPerItem),
      workerUsPerJob: m((r) => r.workerUsPerJob),
      producerUsPerJob: m((r) => r.producerUsPerJob),
      statementsPerJob: m((r) => r.statementsPerJob),
      serverUsPerJob: m((r) => r.serverUsPerJob ?? Number.NaN),
      machineBusyPct: m((r) => r.machineBusyPct ?? Number.NaN),
    };
  });
  printTable(
    `fleet on one machine — median of ${RUNS} run(s), ${JOBS} no-op items from a ` +
      `producer process's pool and ` +
      `channel${cluster ? ', Redis Cluster' : ''}` +
      (KEYS !== undefined
        ? `, ${PAIRED ? 'with and without' : 'over'} ${KEYS} concurrency keys of limit ${KEY_LIMIT}`
        : '') +
      (WARMUP > 0 ? `, after a warm-up drain of ${WARMUP} items per replica` : ''),
    [
      'processes × concurrency',
      'first start ms',
      'half busy ms',
      'all busy ms',
      'jobs/s',
      'min–max',
      'claimed per replica min / max',
      'claim rounds per item',
      'empty rounds per item',
      'wake entries per item',
      'server statements per job',
      'worker CPU µs/job',
      'producer CPU µs/job',
      'server CPU µs/job',
      'machine busy %',
    ],
    rows.map((r) => [
      r.shape,
      fmt(r.firstStartMs, 1),
      fmt(r.halfBusyMs, 1),
      fmt(r.allBusyMs, 1),
      fmt(r.jobsS),
      `${fmt(r.jobsSMin)}–${fmt(r.jobsSMax)}`,
      `${fmt(r.claimedMin)} / ${fmt(r.claimedMax)}`,
      fmt(r.roundsPerItem, 3),
      fmt(r.emptyRoundsPerItem, 3),
      fmt(r.wakeEntriesPerItem, 3),
      fmt(r.statementsPerJob, 3),
      fmt(r.workerUsPerJob, 1),
      fmt(r.producerUsPerJob, 1),
      fmt(r.serverUsPerJob, 1),
      fmt(r.machineBusyPct),
    ]),
    [
      'left',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
      'right',
    ],
  );
  if (PAIRED) {
    printTable(
      `keyed ÷ unkeyed throughput per run (${KEYS} keys of limit ${KEY_LIMIT}; odd runs drained keyed first)`,
      ['processes × concurrency', 'per run', 'median', 'min–max'],
      [...ratios].map(([name, rs]) => {
        const range = minMax(rs);
        return [
          name,
          rs.map((r) => `${fmt(r * 100)}%`).join(' / '),
          `${fmt(median(rs) * 100)}%`,
          `${fmt(range.min * 100)}–${fmt(range.max * 100)}%`,
        ];
      }),
      ['left', 'left', 'right', 'right'],
    );
  }
  const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));
  mkdirSync(resultsDir, { recursive: true });
  const file = `${resultsDir}fleet${cluster ? '-cluster' : ''}-latest.json`;
  const record = {
    rows,
    meta: {
      at: new Date().toISOString(),
      runs: RUNS,
      jobs: JOBS,
      warmup: WARMUP,
      cluster: CLUSTER,
      node: process.version,
      raw: Object.fromEntries(results),
      ...(PAIRED ? { keyedOverUnkeyed: Object.fromEntries(ratios) } : {}),
    },
  };
  writeFileSync(file, `${JSON.stringify(record, null, 2)}\n`);
}

runBenchmark(main);
