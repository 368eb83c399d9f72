/**
 * Engine benchmark (issue 3): the whole path — producer, Redis wake-ups,
 * consumer claim scheduler, executor slots, batched completion — against the
 * local MariaDB and Redis.
 *
 *   npm run bench:engine
 *   npm run bench:engine -- --runs 1 --scale 0.2
 *   npm run bench:engine -- --json        # last stdout line: one JSON object
 *
 * (a) 20,000 no-op jobs pre-enqueued, one consumer at concurrency 32: jobs/s.
 * (b) 1,000 jobs enqueued one by one at 200/s into an idle consumer:
 *     enqueue→handler-start latency p50/p90/p99/max.
 * (c) peak RSS of a consumer alone in a child process (compiled dist/, no
 *     TypeScript loader) while it drains (a)'s workload at concurrency 64.
 * (d) (b) again without Redis: ledger polling every 5 s and every 200 ms.
 * Every run checks that each job ran exactly once; a run that loses or
 * repeats a job fails instead of reporting a number.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { Consumer } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import {
  benchServerUrl,
  createBenchDatabase,
  fmt,
  median,
  minMax,
  percentile,
  printTable,
  progress,
  runCleanups,
} from './support.js';

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const RUNS = Number(flag('--runs') ?? 3);
const SCALE = Number(flag('--scale') ?? 1);
const JSON_OUT = args.includes('--json');
const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const log = createLogger('bench', process.env.LANEWAKE_LOG_LEVEL ?? 'warn');

export interface Env {
  url: string;
  keyPrefix: string;
  ledger: Ledger;
  wake: WakeChannel | undefined;
  queue: string;
  close: () => Promise<void>;
}

/** `serverUrl`: the MySQL-protocol server (no database) to run on; bench/latency.ts points it at a proxy. */
export async function environment(withRedis: boolean, serverUrl = benchServerUrl()): Promise<Env> {
  const db = await createBenchDatabase('lwe', serverUrl);
  const ledger = new Ledger({ url: db.url, poolSize: 12 });
  await ledger.migrate();
  const keyPrefix = `lwbench:${randomBytes(4).toString('hex')}:`;
  const wake = withRedis ? new WakeChannel({ redis: REDIS_URL, keyPrefix, logger: log }) : undefined;
  return {
    url: db.url,
    keyPrefix,
    ledger,
    wake,
    queue: 'bench',
    close: async () => {
      await wake?.timers.close();
      await wake?.dropKeys();
      await wake?.close();
      await ledger.close();
      await db.drop();
    },
  };
}

export async function waitUntil(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** The queue's completed items, counted whole (Ledger.stats caps terminal counts at 10,000). */
export async function completedInLedger(env: Pick<Env, 'ledger' | 'queue'>): Promise<number> {
  const r = await sql<{
    n: number | string;
  }>`SELECT COUNT(*) AS n FROM lw_items WHERE queue = ${env.queue} AND state = 'completed'`.execute(env.ledger.db);
  return Number(r.rows[0]?.n ?? 0);
}

export async function verifyOnce(env: Env, seen: Map<string, number>, expected: number): Promise<void> {
  const repeats = [...seen.values()].filter((n) => n !== 1).length;
  const completed = await completedInLedger(env);
  if (seen.size !== expected || repeats > 0 || completed !== expected) {
    throw new Error(
      `verification failed: ${seen.size} distinct jobs ran (want ${expected}), ` +
        `${repeats} ran more than once, ${completed} completed in the ledger`,
    );
  }
}

/** `jobs` no-op items in batches of 500, announced like any producer's. */
async function enqueueBacklog(env: Env, jobs: number): Promise<void> {
  const producer = new Producer({ ledger: env.ledger, wake: env.wake });
  for (let i = 0; i < jobs; i += 500) {
    await producer.enqueueMany(
      Array.from({ length: Math.min(500, jobs - i) }, (_, k) => ({
        queue: env.queue,
        type: 'noop',
        payload: { n: i + k },
      })),
    );
  }
}

/** A consumer of `env`'s queue whose no-op handler counts each run in `seen`. */
export function noopConsumer(env: Env, concurrency: number, seen: Map<string, number>): Consumer {
  return new Consumer({
    ledger: env.ledger,
    wake: env.wake,
    queue: env.queue,
    concurrency,
    logger: log,
    handlers: { noop: async (job: { id: string }) => void seen.set(job.id, (seen.get(job.id) ?? 0) + 1) },
  });
}

/** (a): drain a pre-enqueued backlog of no-op jobs. */
export async function throughput(
  concurrency: number,
  jobs: number,
  serverUrl = benchServerUrl(),
): Promise<{ jobsS: number; peakRssMb: number }> {
  const env = await environment(true, serverUrl);
  try {
    await enqueueBacklog(env, jobs);
    const seen = new Map<string, number>();
    const consumer = noopConsumer(env, concurrency, seen);
    let peak = process.memoryUsage().rss;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 50);
    const t0 = performance.now();
    await consumer.start();
    await waitUntil(() => consumer.counters.completed >= jobs, 300_000, 'the backlog to drain');
    const elapsed = performance.now() - t0;
    clearInterval(sampler);
    await consumer.stop();
    await verifyOnce(env, seen, jobs);
    return { jobsS: (jobs / elapsed) * 1000, peakRssMb: peak / (1024 * 1024) };
  } finally {
    await env.close();
  }
}

/** (c): the consumer alone in a child process running the compiled package; its peak RSS. */
async function childRss(concurrency: number, jobs: number): Promise<{ peakRssMb: number; jobsS: number }> {
  const env = await environment(true);
  try {
    await enqueueBacklog(env, jobs);
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, [fileURLToPath(new URL('./rss-child.mjs', import.meta.url))], {
        env: {
          ...process.env,
          LW_DATABASE_URL: env.url,
          LW_REDIS_URL: REDIS_URL,
          LW_KEY_PREFIX: env.keyPrefix,
          LW_QUEUE: env.queue,
          LW_JOBS: String(jobs),
          LW_CONCURRENCY: String(concurrency),
        },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let stdout = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve(stdout) : reject(new Error(`rss child exited ${code}`))));
    });
    const last = out.trim().split('\n').pop() ?? '{}';
    const r = JSON.parse(last) as {
      peakRssMb: number;
      jobsS: number;
      completed: number;
      atPeak: Record<string, number>;
    };
    progress(`  consumer process at peak RSS ${r.peakRssMb.toFixed(1)} MB: ${JSON.stringify(r.atPeak)}`);
    const completed = await completedInLedger(env);
    if (completed !== jobs) throw new Error(`rss run: ${completed} of ${jobs} completed`);
    return r;
  } finally {
    await env.close();
  }
}

/**
 * (b)/(d): jobs arriving one at a time into an idle consumer. With
 * `remoteProducer` the producer has its own pool and wake channel, as one in
 * another process has (bench/latency.ts), so every wake-up goes through Redis.
 */
export async function latency(
  mode: { redis: boolean; pollMs?: number; remoteProducer?: boolean },
  jobs: number,
  ratePerS: number,
  serverUrl = benchServerUrl(),
): Promise<number[]> {
  const env = await environment(mode.redis, serverUrl);
  const remote =
    mode.remoteProducer === true
      ? {
          ledger: new Ledger({ url: env.url, poolSize: 4 }),
          wake: new WakeChannel({ redis: REDIS_URL, keyPrefix: env.keyPrefix, logger: log }),
        }
      : undefined;
  try {
    const producer = new Producer(remote ?? { ledger: env.ledger, wake: env.wake });
    const seen = new Map<string, number>();
    const latencies: number[] = [];
    const consumer = new Consumer({
      ledger: env.ledger,
      wake: env.wake,
      queue: env.queue,
      concurrency: 32,
      logger: log,
      ...(mode.pollMs !== undefined ? { pollIntervalMs: mode.pollMs } : {}),
      handlers: {
        ping: async (job: { id: string; payload: { t: number } }) => {
          latencies.push(performance.now() - job.payload.t);
          seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
        },
      },
    });
    await consumer.start();
    if (remote) {
      await waitUntil(() => consumer.counters.sweeps >= 1, 10_000, 'the first sweep');
      // The producer's pool connects before the clock starts, as a running process's would have.
      await remote.ledger.capabilities();
    } else {
      // Let the consumer settle into idle (group joined, first sweep done).
      await new Promise((r) => setTimeout(r, 300));
    }
    const interval = 1000 / ratePerS;
    const start = performance.now();
    for (let i = 0; i < jobs; i++) {
      const due = start + i * interval;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      await producer.enqueue({ queue: env.queue, type: 'ping', payload: { t: performance.now() } });
    }
    await waitUntil(() => consumer.counters.completed >= jobs, 60_000, 'every job to run');
    await consumer.stop();
    await verifyOnce(env, seen, jobs);
    return latencies;
  } finally {
    await remote?.wake.close();
    await remote?.ledger.close();
    await env.close();
  }
}

interface Row {
  name: string;
  unit: string;
  values: number[];
}

async function main(): Promise<void> {
  progress('building dist/ for the child-process measurement');
  execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
  const bulkJobs = Math.round(20_000 * SCALE);
  const latencyJobs = Math.max(50, Math.round(1_000 * SCALE));
  const rows: Row[] = [];
  const add = (name: string, unit: string, v: number): void => {
    const row = rows.find((r) => r.name === name) ?? rows[rows.push({ name, unit, values: [] }) - 1]!;
    row.values.push(v);
  };
  for (let run = 1; run <= RUNS; run++) {
    progress(`run ${run}/${RUNS}: (a) ${bulkJobs} no-op jobs at concurrency 32`);
    add('(a) no-op jobs, concurrency 32', 'jobs/s', (await throughput(32, bulkJobs)).jobsS);
    progress(`run ${run}/${RUNS}: (b) ${latencyJobs} jobs at 200/s, Redis wake-ups`);
    const lat = await latency({ redis: true }, latencyJobs, 200);
    add('(b) latency p50, wake-ups', 'ms', percentile(lat, 50));
    add('(b) latency p90, wake-ups', 'ms', percentile(lat, 90));
    add('(b) latency p99, wake-ups', 'ms', percentile(lat, 99));
    add('(b) latency max, wake-ups', 'ms', Math.max(...lat));
    progress(`run ${run}/${RUNS}: (c) peak RSS of a consumer process at concurrency 64`);
    const c = await childRss(64, bulkJobs);
    add('(c) peak RSS, concurrency 64', 'MB', c.peakRssMb);
    add('(c) no-op jobs, concurrency 64', 'jobs/s', c.jobsS);
    progress(`run ${run}/${RUNS}: (d) ${latencyJobs} jobs at 200/s, no Redis, 200 ms poll`);
    const p200 = await latency({ redis: false, pollMs: 200 }, latencyJobs, 200);
    add('(d) latency p50, poll 200 ms', 'ms', percentile(p200, 50));
    add('(d) latency p99, poll 200 ms', 'ms', percentile(p200, 99));
    progress(`run ${run}/${RUNS}: (d) ${latencyJobs} jobs at 200/s, no Redis, 5 s poll`);
    const p5 = await latency({ redis: false, pollMs: 5_000 }, latencyJobs, 200);
    add('(d) latency p50, poll 5 s', 'ms', percentile(p5, 50));
    add('(d) latency p99, poll 5 s', 'ms', percentile(p5, 99));
  }
  const med = (name: string): number => median(rows.find((r) => r.name === name)?.values ?? []);
  printTable(
    `lanewake engine — median of ${RUNS} run(s), scale ${SCALE} (${bulkJobs} bulk jobs, ${latencyJobs} latency jobs)`,
    ['measure', 'median', 'min–max', 'unit'],
    rows.map((r) => {
      const { min, max } = minMax(r.values);
      const d = r.unit === 'ms' ? 2 : 0;
      return [r.name, fmt(median(r.values), d), `${fmt(min, d)}–${fmt(max, d)}`, r.unit];
    }),
    ['left', 'right', 'right', 'left'],
  );
  const result = {
    jobs_s: Math.round(med('(a) no-op jobs, concurrency 32')),
    latency_p50_ms: round(med('(b) latency p50, wake-ups')),
    latency_p99_ms: round(med('(b) latency p99, wake-ups')),
    poll_5s_p50_ms: round(med('(d) latency p50, poll 5 s')),
    poll_200ms_p50_ms: round(med('(d) latency p50, poll 200 ms')),
    peak_rss_mb_c64: round(med('(c) peak RSS, concurrency 64')),
  };
  const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));
  mkdirSync(resultsDir, { recursive: true });
  const record = {
    ...result,
    meta: {
      at: new Date().toISOString(),
      runs: RUNS,
      scale: SCALE,
      node: process.version,
      rows: rows.map((r) => ({ name: r.name, unit: r.unit, values: r.values })),
    },
  };
  writeFileSync(`${resultsDir}engine-latest.json`, `${JSON.stringify(record, null, 2)}\n`);
  if (JSON_OUT) console.log(JSON.stringify(result));
}

function round(n: number): number {
  return Math.round(n * 1000) / 1000;
}

// Run only as the entry point: bench/latency.ts imports the workloads above.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main()
    .catch(async (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    })
    .finally(async () => {
      await runCleanups();
    });
}
