/**
 * Many replicas on one machine (docs/BENCHMARKS.md, "Many replicas on one machine", "Scaling across processes"): per
 * shape (processes × concurrency, `--shapes`, by default 32 × 2 against 4 × 16, the same 64 slots), that many worker
 * processes, each a Consumer of one queue from the compiled package (bench/lanewake-child.mjs fleet-worker), say
 * they are ready; a producer with its own pool and channel then enqueues `--jobs` no-op items in batches of 500.
 * From the first enqueue: the first start anywhere, when half and when every replica started one (wake spreading),
 * throughput until the ledger counts every item completed, claim rounds (empty ones: their picks all taken by
 * others) and wake entries per item, and the CPU per job of the workers, the producer and the SQL server.
 *
 *   npm run bench:fleet -- --runs 3 --jobs 20000 --shapes 32x2,4x16 [--cluster] [--warmup 5000] [--cpu-prof DIR]
 *   npm run bench:fleet -- --keys 1000 --key-limit 3 [--paired]
 *
 * `--cluster`: the wake channel on a local 6-node Redis Cluster. `--warmup N`: each replica first drains N items,
 * unmeasured (warm code). `--keys K`: the items spread over K concurrency keys of limit `--key-limit`; with
 * `--paired` each shape drains with the keys and without, alternated, and a table gives each run's keyed ÷ unkeyed.
 */
import { once } from 'node:events';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Ledger } from '../../src/ledger/ledger.js';
import { Producer } from '../../src/producer/producer.js';
import { WakeChannel } from '../../src/wake/wake-channel.js';
import { startRedisCluster, type LocalRedisCluster } from '../../test/support/redis-cluster.js';
import {
  buildDist,
  cliFlag,
  cpuSample,
  cpuShare,
  fmt,
  median,
  minMax,
  onCleanup,
  percentile,
  progress,
  sleep,
  withAdmin,
} from '../support.js';
import {
  completedInLedger,
  defineWorkload,
  environment,
  numFlag,
  REDIS_URL,
  silent as log,
  type Table,
} from '../workload.js';

const JOBS = numFlag('--jobs', 20_000);
const WARMUP = numFlag('--warmup', 0);
const CPU_PROF_DIR = cliFlag('--cpu-prof');
const KEYS = cliFlag('--keys') === undefined ? undefined : Number(cliFlag('--keys'));
const KEY_LIMIT = numFlag('--key-limit', 3);
const PAIRED = process.argv.includes('--paired');
if (PAIRED && KEYS === undefined) throw new Error('--paired compares a keyed drain with an unkeyed one: give --keys');
const WORKER = fileURLToPath(new URL('../lanewake-child.mjs', import.meta.url));
let cluster: LocalRedisCluster | undefined;

interface Variant {
  processes: number;
  concurrency: number;
  keys: number | undefined;
}
const VARIANTS: Variant[] = (cliFlag('--shapes') ?? '32x2,4x16').split(',').flatMap((s) => {
  const [processes, concurrency] = s.split('x').map(Number);
  if (!processes || !concurrency) throw new Error(`bad shape '${s}': want processesxconcurrency, e.g. 32x2`);
  return (PAIRED ? [KEYS, undefined] : [KEYS]).map((keys) => ({ processes, concurrency, keys }));
});
const label = (v: Variant): string =>
  `${v.processes} × ${v.concurrency}${PAIRED ? (v.keys !== undefined ? ', keyed' : ', unkeyed') : ''}`;

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
  /** Statements the server ran per job (its `Questions`, every client's: the producer's and this poll's too). */
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
  const child = spawn(process.execPath, [...prof, WORKER, 'fleet-worker'], {
    env,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
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

async function shape({ processes, concurrency, keys }: Variant): Promise<ShapeResult> {
  const env = await environment(false);
  const redisUrl = cluster?.url ?? REDIS_URL;
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

const COLUMNS: [string, (r: ShapeResult) => number | undefined, number][] = [
  ['first start ms', (r) => r.firstStartMs, 1],
  ['half busy ms', (r) => r.halfBusyMs, 1],
  ['all busy ms', (r) => r.allBusyMs, 1],
  ['jobs/s', (r) => r.jobsS, 0],
  ['claimed per replica min', (r) => r.claimedMin, 0],
  ['max', (r) => r.claimedMax, 0],
  ['claim rounds per item', (r) => r.roundsPerItem, 3],
  ['empty rounds per item', (r) => r.emptyRoundsPerItem, 3],
  ['wake entries per item', (r) => r.wakeEntriesPerItem, 3],
  ['server statements per job', (r) => r.statementsPerJob, 3],
  ['worker CPU µs/job', (r) => r.workerUsPerJob, 1],
  ['producer CPU µs/job', (r) => r.producerUsPerJob, 1],
  ['server CPU µs/job', (r) => r.serverUsPerJob, 1],
  ['machine busy %', (r) => r.machineBusyPct, 0],
];

function report(of: (v: Variant) => ShapeResult[], runs: number): Table[] {
  const tables: Table[] = [
    {
      title:
        `fleet on one machine — median of ${runs} run(s), ${JOBS} no-op items from a producer process's pool and ` +
        `channel${cluster ? ', Redis Cluster' : ''}` +
        (KEYS !== undefined ? `, ${PAIRED ? 'with and without' : 'over'} ${KEYS} keys of limit ${KEY_LIMIT}` : '') +
        (WARMUP > 0 ? `, after a warm-up drain of ${WARMUP} items per replica` : ''),
      headers: ['processes × concurrency', 'jobs/s min–max', ...COLUMNS.map(([h]) => h)],
      rows: VARIANTS.map((v) => {
        const { min, max } = minMax(of(v).map((r) => r.jobsS));
        const cells = COLUMNS.map(([, f, d]) => fmt(median(of(v).map((r) => f(r) ?? Number.NaN)), d));
        return [label(v), `${fmt(min)}–${fmt(max)}`, ...cells];
      }),
      align: ['left', ...COLUMNS.map((): 'right' => 'right'), 'right'],
    },
  ];
  if (PAIRED) {
    const shapes = VARIANTS.filter((v) => v.keys !== undefined);
    tables.push({
      title: `keyed ÷ unkeyed throughput per run (${KEYS} keys of limit ${KEY_LIMIT}; odd runs drained keyed first)`,
      headers: ['processes × concurrency', 'per run', 'median'],
      rows: shapes.map((k) => {
        const u = VARIANTS.find(
          (v) => v.keys === undefined && v.processes === k.processes && v.concurrency === k.concurrency,
        )!;
        const ratios = of(k).map((r, i) => r.jobsS / (of(u)[i]?.jobsS ?? Number.NaN));
        return [
          `${k.processes} × ${k.concurrency}`,
          ratios.map((r) => `${fmt(r * 100)}%`).join(' / '),
          `${fmt(median(ratios) * 100)}%`,
        ];
      }),
    });
  }
  return tables;
}

export default defineWorkload<Variant, ShapeResult>({
  about: 'many worker processes of one queue: wake spreading, throughput and CPU per job by shape',
  variants: VARIANTS,
  label,
  setup: async () => {
    buildDist();
    if (!process.argv.includes('--cluster')) return;
    progress('starting a local 6-node Redis Cluster');
    const c = await startRedisCluster();
    cluster = c;
    onCleanup(() => c.stop());
  },
  measure: shape,
  line: (_, r) => `all busy ${fmt(r.allBusyMs, 1)} ms, ${fmt(r.jobsS)} jobs/s, claimed ${r.claimedMin}–${r.claimedMax}`,
  report,
  save: true,
  resultName: () => `fleet${cluster ? '-cluster' : ''}`,
});
