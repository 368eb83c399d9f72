/**
 * Many queues in one worker (issue 16 §3; docs/operations/scaling.md): one process serving N queues, as a
 * multi-tenant worker does, against the same process serving one. N consumers share one Ledger pool and one
 * WakeChannel, as `lanewake worker` runs them. Measured: the connections it holds (Redis CLIENT LIST by the
 * channel's connection names, MariaDB PROCESSLIST rows on the run's database); idle CPU over `--idle-s` seconds
 * (this process and mariadbd, % of a core); enqueue→handler-start of `--jobs` jobs at 50/s, each to a random
 * queue, from a producer with its own pool and channel (every wake-up through Redis). Each job must run once.
 * `--queues 200 --idle-s 60 --jobs 300`; writes bench/results/queues-latest.json.
 */
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import { Ledger } from '../../src/ledger/ledger.js';
import { Producer } from '../../src/producer/producer.js';
import { WakeChannel } from '../../src/wake/wake-channel.js';
import { cpuSample, cpuShare, fmt, median, percentile, progress, sleep } from '../support.js';
import { consumers, defineWorkload, numFlag, REDIS_URL, silent, waitUntil, withFreshLedger } from '../workload.js';

const QUEUES = numFlag('--queues', 200);
const IDLE_S = numFlag('--idle-s', 60);
const JOBS = numFlag('--jobs', 300);
const RATE_PER_S = 50;

interface Result {
  redisConnections: number;
  dbConnections: number;
  idleNodePct: number;
  idleServerPct: number | undefined;
  latencies: number[];
}

async function redisConnections(): Promise<number> {
  const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    const names = ['lanewake:wake:', 'lanewake:control:', 'lanewake:publish', 'lanewake-timers'];
    const list = (await admin.client('LIST')) as string;
    return list.split('\n').filter((line) => names.some((p) => line.includes(`name=${p}`))).length;
  } finally {
    admin.disconnect();
  }
}

const measure = (queues: number): Promise<Result> =>
  withFreshLedger(
    'lwe',
    async (env) => {
      const { ledger, wake } = env;
      const latencies: number[] = [];
      const seen = new Map<string, number>();
      const names = Array.from({ length: queues }, (_, i) => `bench-${i}`);
      const ping = async (job: { id: string; payload: { t: number } }): Promise<void> => {
        latencies.push(performance.now() - job.payload.t);
        seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
      };
      const cs = names.flatMap((queue) => consumers(env, 1, { queue, concurrency: 8, handlers: { ping } }));
      const remote = {
        ledger: new Ledger({ url: ledger.config.url, poolSize: 4 }),
        wake: new WakeChannel({ redis: REDIS_URL, keyPrefix: wake.keyPrefix, logger: silent }),
      };
      try {
        for (const c of cs) await c.start();
        await waitUntil(() => cs.every((c) => c.counters.sweeps >= 1), 60_000, 'every first sweep');
        // The consumers' side only: the producer's channel and pool are not open yet.
        const redis = await redisConnections();
        const db = new URL(ledger.config.url).pathname.slice(1);
        const dbRows = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST
          WHERE DB = ${db}`.execute(ledger.db);
        const dbConnections = Number(dbRows.rows[0]?.n ?? 0);
        progress(`  ${queues} queue(s): ${redis} Redis, ${dbConnections} database connections; idle ${IDLE_S} s`);
        const from = cpuSample();
        await sleep(IDLE_S * 1000);
        const idle = cpuShare(from);
        const producer = new Producer(remote);
        await remote.ledger.capabilities();
        const start = performance.now();
        for (let i = 0; i < JOBS; i++) {
          const wait = start + (i * 1000) / RATE_PER_S - performance.now();
          if (wait > 0) await sleep(wait);
          const queue = names[Math.floor(Math.random() * names.length)]!;
          await producer.enqueue({ queue, type: 'ping', payload: { t: performance.now() } });
        }
        await waitUntil(() => seen.size >= JOBS, 60_000, 'every job to run');
        const repeats = [...seen.values()].filter((n) => n !== 1).length;
        if (repeats > 0) throw new Error(`verification failed: ${repeats} jobs ran more than once`);
        const { nodePct, serverPct } = idle;
        return { redisConnections: redis, dbConnections, idleNodePct: nodePct, idleServerPct: serverPct, latencies };
      } finally {
        await Promise.allSettled(cs.map((c) => c.stop()));
        await remote.wake.close();
        await remote.ledger.close();
      }
    },
    12,
  );

export default defineWorkload<number, Result>({
  about: 'one process serving 1 queue and N queues: connections, idle CPU, enqueue→start (Many queues)',
  variants: [1, QUEUES],
  label: (q) => `${q} queue(s)`,
  save: true,
  measure,
  line: (_, r) => `p50 ${fmt(percentile(r.latencies, 50), 2)} ms, idle node ${fmt(r.idleNodePct, 2)} %`,
  report: (of, runs) => [
    {
      title:
        `one process, many queues — median of ${runs} run(s); idle ${IDLE_S} s; ${JOBS} jobs at ${RATE_PER_S}/s ` +
        `to random queues from another pool and channel`,
      headers: [
        'queues',
        'Redis conns',
        'DB conns',
        'idle CPU node %',
        'idle CPU mariadbd %',
        'p50 ms',
        'p90 ms',
      ].concat(['p99 ms', 'max ms']),
      rows: [1, QUEUES].map((q) => {
        const m = (f: (r: Result) => number | undefined, digits: number): string =>
          fmt(
            median(
              of(q)
                .map(f)
                .filter((v): v is number => v !== undefined),
            ),
            digits,
          );
        const p = (n: number) => (r: Result) => percentile(r.latencies, n);
        return [String(q), m((r) => r.redisConnections, 0), m((r) => r.dbConnections, 0)].concat(
          [m((r) => r.idleNodePct, 2), m((r) => r.idleServerPct, 2), m(p(50), 2), m(p(90), 2), m(p(99), 2)],
          m((r) => Math.max(...r.latencies), 2),
        );
      }),
      align: Array(9).fill('right'),
    },
  ],
});
