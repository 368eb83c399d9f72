/**
 * Where a job from another process spends its time before its handler
 * starts (issue 16 §2): a producer alone in a child process (its own pool and
 * wake channel, bench/breakdown-producer.ts) enqueues jobs one by one at a
 * steady rate into an idle consumer in this process, and each step is
 * stamped with the wall clock on this host:
 *
 *   offer       enqueue called → the look for a consumer's offer answered (LPOP; 0 when not looked)
 *   insert      → the INSERT committed (the ledger call returned)
 *   xadd        → the wake-up's XADD answered, or the handoff's (the producer's side)
 *   Jobs woken through the stream:
 *   delivery    INSERT committed → the consumer's wake reader handed the entry to its claim side
 *   schedule    → the claim by id was sent
 *   claim       → the claim (CAS and read-back, one round trip) answered
 *   start       → the handler started
 *   Jobs inserted claimed under an offer and handed over (docs/design.md §6):
 *   handoff     INSERT committed → the handler started
 *   total       enqueue called → handler started
 *
 *   npm run bench:breakdown
 *   npm run bench:breakdown -- --runs 5 --jobs 400 --rate 100 --replicas 8
 *
 * `--replicas N` starts N − 1 more consumers of the queue, each in its own
 * process (bench/fleet-worker.mjs, from the compiled package), so wake-ups are
 * spread over N readers (the first item of a burst should not pay for that). Medians over the runs of each percentile.
 * Results: bench/results/breakdown-latest.json.
 */
import { execFileSync, fork } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Consumer } from '../src/consumer/consumer.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { createLogger } from '../src/log.js';
import { completedInLedger, environment, verifyOnce, waitUntil } from './engine.js';
import {
  benchServerUrl,
  childMessage,
  cliFlag,
  codeRevision,
  fmt,
  median,
  percentile,
  printTable,
  progress,
  runBenchmark,
  sleep,
} from './support.js';

const RUNS = Number(cliFlag('--runs') ?? 3);
const JOBS = Number(cliFlag('--jobs') ?? 400);
const RATE = Number(cliFlag('--rate') ?? 100);
const REPLICAS = Number(cliFlag('--replicas') ?? 1);
const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const log = createLogger('bench', process.env.LANEWAKE_LOG_LEVEL ?? 'warn');
const here = (p: string): string => fileURLToPath(new URL(p, import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();

const SEGMENTS = ['offer', 'insert', 'xadd', 'delivery', 'schedule', 'claim', 'start', 'handoff', 'total'] as const;
type Segment = (typeof SEGMENTS)[number];

interface ProducerStamps {
  id: string;
  called: number;
  offered: number;
  committed: number;
  published: number;
  handedOver: boolean;
}

function child(script: string, env: Record<string, string>): ReturnType<typeof fork> {
  const execArgv = script.endsWith('.ts') ? ['--import', 'tsx'] : [];
  return fork(here(script), [], {
    env: { ...process.env, ...env },
    execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
}

/** One run: per segment, every job's milliseconds. */
async function run(serverUrl: string): Promise<Record<Segment, number[]>> {
  const env = await environment(true, serverUrl);
  const read = new Map<string, number>();
  const claimSent = new Map<string, number>();
  const claimed = new Map<string, number>();
  const started = new Map<string, number>();
  const seen = new Map<string, number>();
  const childEnv = {
    LW_DATABASE_URL: env.url,
    LW_REDIS_URL: REDIS_URL,
    LW_KEY_PREFIX: env.keyPrefix,
    LW_QUEUE: env.queue,
  };
  const replicas = Array.from({ length: REPLICAS - 1 }, () =>
    child('./fleet-worker.mjs', { ...childEnv, LW_CONCURRENCY: '32' }),
  );
  const producer = child('./breakdown-producer.ts', { ...childEnv, LW_JOBS: String(JOBS), LW_RATE: String(RATE) });
  try {
    // Observed on the instance, not replaced: each call goes on to the real method.
    const claimByIds = env.ledger.claimByIds.bind(env.ledger);
    env.ledger.claimByIds = async (spec): Promise<ClaimedItem[]> => {
      const at = now();
      for (const id of spec.ids) claimSent.set(id, at);
      const items = await claimByIds(spec);
      const back = now();
      for (const it of items) claimed.set(it.id, back);
      return items;
    };
    const consumer = new Consumer({
      ledger: env.ledger,
      wake: env.wake,
      queue: env.queue,
      concurrency: 32,
      logger: log,
      handlers: {
        noop: async (job: { id: string }) => {
          started.set(job.id, now());
          seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
        },
      },
    });
    consumer.on('wakeRead', (r) => {
      const at = now();
      for (const id of r.ids) if (!read.has(id)) read.set(id, at);
    });
    await consumer.start();
    await Promise.all([...replicas.map((r) => childMessage(r, 'ready')), childMessage(producer, 'ready')]);
    await waitUntil(() => consumer.counters.sweeps >= 1, 10_000, 'the first sweep');
    const stamps = childMessage<{ stamps: ProducerStamps[] }>(producer, 'stamps');
    producer.send({ type: 'go' });
    const { stamps: jobs } = await stamps;
    if (REPLICAS === 1) {
      await waitUntil(() => consumer.counters.completed >= JOBS, 60_000, 'every job to run');
      await consumer.stop();
      await verifyOnce(env, seen, JOBS);
    } else {
      // Some jobs ran in the replicas: the ledger says when all have completed.
      const deadline = Date.now() + 60_000;
      while ((await completedInLedger(env)) < JOBS) {
        if (Date.now() > deadline) throw new Error('timed out waiting for every job to run');
        await new Promise((r) => setTimeout(r, 20));
      }
      await consumer.stop();
      if ([...seen.values()].some((n) => n !== 1)) throw new Error('a job ran twice here');
    }
    const out = Object.fromEntries(SEGMENTS.map((s) => [s, [] as number[]])) as Record<Segment, number[]>;
    for (const j of jobs) {
      const r = read.get(j.id);
      const c0 = claimSent.get(j.id);
      const c1 = claimed.get(j.id);
      const s = started.get(j.id);
      if (s === undefined) continue; // started by a replica
      out.total.push(s - j.called);
      out.offer.push(j.offered - j.called);
      out.insert.push(j.committed - j.offered);
      out.xadd.push(j.published - j.committed);
      if (j.handedOver) {
        out.handoff.push(s - j.committed);
        continue;
      }
      // Only jobs that went the whole named path: read from Redis, then claimed by id.
      if (r === undefined || c0 === undefined || c1 === undefined) continue;
      out.delivery.push(r - j.committed);
      out.schedule.push(c0 - r);
      out.claim.push(c1 - c0);
      out.start.push(s - c1);
    }
    return out;
  } finally {
    // A replica stops on 'stop', sends its figures and exits.
    for (const r of replicas) if (r.connected) r.send({ type: 'stop' });
    await Promise.all(
      replicas.map((r) => (r.exitCode !== null ? undefined : Promise.race([once(r, 'exit'), sleep(10_000)]))),
    );
    producer.kill('SIGTERM');
    await env.close();
  }
}

runBenchmark(async () => {
  const serverUrl = benchServerUrl();
  if (REPLICAS > 1) {
    progress('building dist/ for the replica processes');
    execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
  }
  progress(
    `latency breakdown: ${RUNS} run(s) of ${JOBS} jobs at ${RATE}/s, producer in its own process, ${REPLICAS} consumer(s)`,
  );
  const runs: Record<Segment, number[]>[] = [];
  for (let i = 0; i < RUNS; i++) {
    runs.push(await run(serverUrl));
    const t = runs.at(-1)!.total;
    progress(
      `  run ${i + 1}: total p50 ${fmt(percentile(t, 50), 2)} ms, p99 ${fmt(percentile(t, 99), 2)} ms (${t.length} jobs here)`,
    );
  }
  const cell = (s: Segment, p: number): number => median(runs.map((r) => percentile(r[s], p)));
  const rows = SEGMENTS.map((s) => [
    s,
    ...[50, 90, 99].map((p) => fmt(cell(s, p), 2)),
    fmt(median(runs.map((r) => Math.max(...r[s]))), 2),
    String(median(runs.map((r) => r[s].length))),
  ]);
  printTable(
    'enqueue → handler start, producer in another process (ms; medians over runs)',
    ['step', 'p50', 'p90', 'p99', 'max', 'jobs'],
    rows,
    ['left'],
  );
  const result = {
    at: new Date().toISOString(),
    code: codeRevision(),
    runs: RUNS,
    jobs: JOBS,
    rate: RATE,
    replicas: REPLICAS,
    segments: Object.fromEntries(
      SEGMENTS.map((s) => [
        s,
        { p50: cell(s, 50), p90: cell(s, 90), p99: cell(s, 99), max: median(runs.map((r) => Math.max(...r[s]))) },
      ]),
    ),
  };
  writeFileSync(here('./results/breakdown-latest.json'), `${JSON.stringify(result, null, 2)}\n`);
});
