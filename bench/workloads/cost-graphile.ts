/**
 * graphile-worker, tuned (local queue + batched completion, as
 * bench/peers/graphile.ts sets it up), measured as the cost workload (cost.ts) measures
 * lanewake: N jobs enqueued in batches of 500 (add_jobs), then a worker of
 * the same concurrency processes them. Per phase: PostgreSQL's CPU (the
 * postmaster and every backend, cost-meter.ts), this process's CPU, and the
 * queries sent (each pg `query` call is one round trip).
 *
 * The process phase runs from the worker's start until the adapter counts
 * every completion written (graphile-worker batches them).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { graphileFactories } from '../peers/graphile.js';
import { PG_URL } from '../peers/types.js';
import type { BenchJob, PeerAdapter, RunningWorker } from '../peers/types.js';
import { PostgresMeter } from '../cost-meter.js';
import { ENQUEUE_BATCH, type PhaseCost } from './cost-phases.js';
import { waitUntil } from '../workload.js';
import { onCleanup, sleep } from '../support.js';

export interface PeerCost {
  system: string;
  mode: string;
  server: string;
  enqueue: PhaseCost;
  process: PhaseCost;
}

let queriesSent = 0;
let counting = false;

/** Counts every query this process sends over pg from now on (the driver is observed, not replaced). */
function countPgQueries(): void {
  if (counting) return;
  counting = true;
  type QueryFn = (this: unknown, ...args: unknown[]) => unknown;
  const proto = pg.Client.prototype as unknown as { query: QueryFn };
  const original = proto.query;
  proto.query = function (this: unknown, ...args: unknown[]) {
    queriesSent++;
    return original.apply(this, args);
  };
}

async function measure(meter: PostgresMeter, jobs: number, fn: () => Promise<void>): Promise<PhaseCost> {
  const queriesBefore = queriesSent;
  const before = meter.sample();
  await fn();
  const after = meter.sample();
  const queries = queriesSent - queriesBefore;
  return { ...meter.delta(before, after), jobs, roundTrips: queries, statements: queries };
}

async function serverVersion(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const r = await client.query<{ server_version: string }>('SHOW server_version');
    return `PostgreSQL ${(r.rows[0]?.server_version ?? '?').split(' ')[0]}`;
  } finally {
    await client.end();
  }
}

export async function graphileCost(jobs: number, concurrency: number): Promise<PeerCost> {
  // The tuned mode: the one the side-by-side benchmark runs its bulk workload with.
  const factory =
    graphileFactories.find((f) => f.mode === 'local queue + batched completion') ??
    graphileFactories.find((f) => f.workloads.includes('bulk'));
  if (factory === undefined) throw new Error('bench/peers/graphile.ts has no graphile-worker mode for bulk work');
  const url = PG_URL;
  const server = await serverVersion(url);
  const meter = PostgresMeter.find(url);
  countPgQueries();
  const id = `cost${randomBytes(4).toString('hex')}`;
  const adapter: PeerAdapter = factory.create({ id });
  const unregister = onCleanup(() => adapter.teardown());
  let worker: RunningWorker | undefined;
  try {
    await adapter.setup();
    await adapter.connect();
    const enqueue = await measure(meter, jobs, async () => {
      for (let i = 0; i < jobs; i += ENQUEUE_BATCH) {
        const batch = Array.from({ length: Math.min(ENQUEUE_BATCH, jobs - i) }, (_, k): BenchJob => ({ n: i + k }));
        await adapter.enqueueBatch(batch);
      }
    });
    const runs = new Map<number, number>();
    let completed = 0;
    // Measured up to the last completion written, while the worker's backends are still there to be read.
    const processing = await measure(meter, jobs, async () => {
      worker = await adapter.startWorker({
        concurrency,
        onJob: (job) => void runs.set(job.n, (runs.get(job.n) ?? 0) + 1),
      });
      await waitUntil(() => runs.size >= jobs, 600_000, 'graphile-worker to start every job');
      const deadline = Date.now() + 60_000;
      while ((completed = await adapter.completedCount()) < jobs && Date.now() < deadline) await sleep(10);
    });
    await worker?.stop();
    worker = undefined;
    const repeats = [...runs.values()].filter((n) => n !== 1).length;
    if (runs.size !== jobs || repeats > 0)
      throw new Error(`graphile-worker ran ${runs.size} distinct jobs of ${jobs}, ${repeats} more than once`);
    if (completed !== jobs) throw new Error(`graphile-worker completed ${completed} of ${jobs} jobs`);
    return { system: 'graphile-worker', mode: factory.mode, server, enqueue, process: processing };
  } finally {
    await worker?.stop().catch(() => undefined);
    await adapter.close().catch(() => undefined);
    await adapter.teardown();
    unregister();
  }
}
