/**
 * Many queues in one worker (issue 16 §3): one process serving N queues, as
 * a multi-tenant worker does, against the same process serving one.
 *
 *   npm run bench:queues
 *   npm run bench:queues -- --queues 200 --idle-s 60 --jobs 300 --runs 3
 *
 * For each shape (1 queue, then N): N consumers share one Ledger pool and one
 * WakeChannel, as `lanewake worker` runs them. Measured:
 * - connections it holds: Redis (CLIENT LIST, by the channel's connection
 *   names) and MariaDB (PROCESSLIST rows on the run's database);
 * - idle CPU over --idle-s seconds: this process and mariadbd, % of a core;
 * - enqueue→handler-start latency of --jobs jobs at 50/s, each to a random
 *   queue, from a producer with its own pool and channel (another process's
 *   shape: every wake-up goes through Redis): p50/p90/p99/max.
 * Every run checks that each job ran exactly once.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import { Consumer } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { environment, waitUntil } from './engine.js';
import {
  cliFlag,
  cpuSample,
  cpuShare,
  fmt,
  median,
  percentile,
  printTable,
  progress,
  runBenchmark,
} from './support.js';

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => cliFlag(name, args);
const RUNS = Number(flag('--runs') ?? 3);
const QUEUES = Number(flag('--queues') ?? 200);
const IDLE_S = Number(flag('--idle-s') ?? 60);
const JOBS = Number(flag('--jobs') ?? 300);
const RATE_PER_S = 50;
const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const log = createLogger('bench', process.env.LANEWAKE_LOG_LEVEL ?? 'warn');

interface ShapeResult {
  queues: number;
  redisConnections: number;
  dbConnections: number;
  idleNodePct: number;
  idleServerPct: number | undefined;
  latencies: number[];
}

async function redisConnectionsNamed(prefixes: readonly string[]): Promise<number> {
  const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    const list = (await admin.client('LIST')) as string;
    return list.split('\n').filter((line) => prefixes.some((p) => line.includes(`name=${p}`))).length;
  } finally {
    admin.disconnect();
  }
}

async function shape(queues: number): Promise<ShapeResult> {
  const env = await environment(true);
  const wake = env.wake!;
  const latencies: number[] = [];
  const seen = new Map<string, number>();
  const names = Array.from({ length: queues }, (_, i) => `bench-${i}`);
  const consumers = names.map(
    (queue) =>
      new Consumer({
        ledger: env.ledger,
        wake,
        queue,
        concurrency: 8,
        logger: log,
        handlers: {
          ping: async (job: { id: string; payload: { t: number } }) => {
            latencies.push(performance.now() - job.payload.t);
            seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
          },
        },
      }),
  );
  const remote = {
    ledger: new Ledger({ url: env.url, poolSize: 4 }),
    wake: new WakeChannel({ redis: REDIS_URL, keyPrefix: env.keyPrefix, logger: log }),
  };
  try {
    for (const c of consumers) await c.start();
    await waitUntil(() => consumers.every((c) => c.counters.sweeps >= 1), 60_000, 'every first sweep');

    // Connections of the consumers' side only: the producer's channel and pool are not open yet.
    const hub = wake.hubFor('unused', log).name;
    const redisConnections = await redisConnectionsNamed([
      `lanewake:wake:`,
      `lanewake:control:`,
      'lanewake:publish',
      'lanewake-timers',
    ]);
    const db = new URL(env.url).pathname.slice(1);
    const dbRows = await sql<{
      n: number | string;
    }>`SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = ${db}`.execute(env.ledger.db);
    const dbConnections = Number(dbRows.rows[0]?.n ?? 0);
    progress(
      `  ${queues} queue(s): ${redisConnections} Redis connections (hub ${hub}), ` +
        `${dbConnections} database connections; idle ${IDLE_S} s`,
    );

    const from = cpuSample();
    await new Promise((r) => setTimeout(r, IDLE_S * 1000));
    const idle = cpuShare(from);

    const producer = new Producer(remote);
    await remote.ledger.capabilities();
    const interval = 1000 / RATE_PER_S;
    const start = performance.now();
    for (let i = 0; i < JOBS; i++) {
      const wait = start + i * interval - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const queue = names[Math.floor(Math.random() * names.length)]!;
      await producer.enqueue({ queue, type: 'ping', payload: { t: performance.now() } });
    }
    await waitUntil(() => seen.size >= JOBS, 60_000, 'every job to run');
    const repeats = [...seen.values()].filter((n) => n !== 1).length;
    if (repeats > 0) throw new Error(`verification failed: ${repeats} jobs ran more than once`);
    return {
      queues,
      redisConnections,
      dbConnections,
      idleNodePct: idle.nodePct,
      idleServerPct: idle.serverPct,
      latencies,
    };
  } finally {
    await Promise.allSettled(consumers.map((c) => c.stop()));
    await remote.wake.close();
    await remote.ledger.close();
    await env.close();
  }
}

async function main(): Promise<void> {
  const shapes = [1, QUEUES];
  const results: ShapeResult[][] = shapes.map(() => []);
  for (let run = 1; run <= RUNS; run++) {
    for (const [i, q] of shapes.entries()) {
      progress(`run ${run}/${RUNS}: one process serving ${q} queue(s)`);
      results[i]!.push(await shape(q));
    }
  }
  const rows = shapes.map((q, i) => {
    const rs = results[i]!;
    const m = (f: (r: ShapeResult) => number | undefined): number =>
      median(rs.map(f).filter((v): v is number => v !== undefined));
    return {
      queues: q,
      redisConnections: m((r) => r.redisConnections),
      dbConnections: m((r) => r.dbConnections),
      idleNodePct: m((r) => r.idleNodePct),
      idleServerPct: m((r) => r.idleServerPct),
      p50: m((r) => percentile(r.latencies, 50)),
      p90: m((r) => percentile(r.latencies, 90)),
      p99: m((r) => percentile(r.latencies, 99)),
      max: m((r) => Math.max(...r.latencies)),
    };
  });
  printTable(
    `one process, many queues — median of ${RUNS} run(s); idle ${IDLE_S} s; ${JOBS} ` +
      `jobs at ${RATE_PER_S}/s to random queues from another pool and channel`,
    [
      'queues',
      'Redis conns',
      'DB conns',
      'idle CPU node %',
      'idle CPU mariadbd %',
      'p50 ms',
      'p90 ms',
      'p99 ms',
      'max ms',
    ],
    rows.map((r) => [
      String(r.queues),
      fmt(r.redisConnections, 0),
      fmt(r.dbConnections, 0),
      fmt(r.idleNodePct, 2),
      fmt(r.idleServerPct, 2),
      fmt(r.p50, 2),
      fmt(r.p90, 2),
      fmt(r.p99, 2),
      fmt(r.max, 2),
    ]),
    ['right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
  );
  const resultsDir = fileURLToPath(new URL('./results/', import.meta.url));
  mkdirSync(resultsDir, { recursive: true });
  const record = {
    rows,
    meta: {
      at: new Date().toISOString(),
      runs: RUNS,
      idleS: IDLE_S,
      jobs: JOBS,
      node: process.version,
      raw: results.map((rs) =>
        rs.map(({ latencies, ...rest }) => ({
          ...rest,
          p50: percentile(latencies, 50),
          p99: percentile(latencies, 99),
        })),
      ),
    },
  };
  writeFileSync(`${resultsDir}queues-latest.json`, `${JSON.stringify(record, null, 2)}\n`);
}

runBenchmark(main);
