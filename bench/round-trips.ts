/**
 * Round trips per job, by path (bench/latency.ts runs these): the SQL round
 * trips the engine sends for each job, counted at the driver (sql-count.ts),
 * split into enqueue (producer), claim and completion (consumer), for
 * laneless and laned jobs, in bulk and one job at a time.
 *
 * - bulk: `jobs` no-op jobs enqueued in batches of 500 (counted alone), then
 *   drained by one consumer at concurrency 64 (counted alone).
 * - single: an idle consumer; jobs enqueued one at a time, each waited for
 *   until completed before the next, so every job takes the idle path. Either
 *   the producer shares the consumer's process and wake channel (the job is
 *   inserted already claimed) or it has its own pool and wake channel, as
 *   another process would (the job crosses the Redis stream and is claimed).
 */
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { environment, noopConsumer, verifyOnce, waitUntil } from './engine.js';
import { setPhase, takePhase, totalsByKind, type KindTotals, type ShapeCount } from './sql-count.js';

const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const log = createLogger('bench', process.env.LANEWAKE_LOG_LEVEL ?? 'warn');
const BATCH = 500;

export type RoundTripWorkload = 'bulk' | 'single, same process' | 'single, own producer';

export interface RoundTripRow {
  workload: RoundTripWorkload;
  laned: boolean;
  jobs: number;
  /** Per job, by kind; `session` and `other` (startup, sweeps) are not the job's. */
  perJob: KindTotals;
  /** Every round trip of the producer's and the consumer's phases, by shape. */
  enqueueShapes: ShapeCount[];
  consumerShapes: ShapeCount[];
}

interface Sizes {
  bulkJobs: number;
  lanes: number;
  singleJobs: number;
}

export async function roundTripRows(serverUrl: string, sizes: Sizes): Promise<RoundTripRow[]> {
  const rows: RoundTripRow[] = [];
  for (const laned of [false, true]) {
    rows.push(await bulk(serverUrl, sizes.bulkJobs, laned ? sizes.lanes : 0));
    rows.push(await single(serverUrl, sizes.singleJobs, laned, true));
    rows.push(await single(serverUrl, sizes.singleJobs, laned, false));
  }
  return rows;
}

function row(
  workload: RoundTripWorkload,
  laned: boolean,
  jobs: number,
  enqueueShapes: ShapeCount[],
  consumerShapes: ShapeCount[],
): RoundTripRow {
  const all = totalsByKind([...enqueueShapes, ...consumerShapes]);
  const perJob = Object.fromEntries(Object.entries(all).map(([k, v]) => [k, v / jobs])) as KindTotals;
  return { workload, laned, jobs, perJob, enqueueShapes, consumerShapes };
}

async function bulk(serverUrl: string, jobs: number, lanes: number): Promise<RoundTripRow> {
  setPhase('rt:setup');
  const env = await environment(true, serverUrl);
  try {
    setPhase('rt:enqueue');
    const producer = new Producer({ ledger: env.ledger, wake: env.wake });
    for (let i = 0; i < jobs; i += BATCH) {
      const n = Math.min(BATCH, jobs - i);
      await producer.enqueueMany(
        Array.from({ length: n }, (_, k) => ({
          queue: env.queue,
          type: 'noop',
          payload: { n: i + k },
          ...(lanes > 0 ? { lane: `l${(i + k) % lanes}` } : {}),
        })),
      );
    }
    const enqueueShapes = takePhase('rt:enqueue');
    setPhase('rt:consume');
    const seen = new Map<string, number>();
    const consumer = noopConsumer(env, 64, seen);
    await consumer.start();
    await waitUntil(() => consumer.counters.completed >= jobs, 300_000, 'the backlog to drain');
    const consumerShapes = takePhase('rt:consume');
    setPhase('rt:teardown');
    await consumer.stop();
    await verifyOnce(env, seen, jobs);
    return row('bulk', lanes > 0, jobs, enqueueShapes, consumerShapes);
  } finally {
    await env.close();
    takePhase('rt:setup');
    takePhase('rt:teardown');
  }
}

async function single(serverUrl: string, jobs: number, laned: boolean, sameProcess: boolean): Promise<RoundTripRow> {
  setPhase('rt:setup');
  const env = await environment(true, serverUrl);
  const own = sameProcess
    ? undefined
    : {
        ledger: new Ledger({ url: env.url, poolSize: 4 }),
        wake: new WakeChannel({ redis: REDIS_URL, keyPrefix: env.keyPrefix, logger: log }),
      };
  try {
    const producer = new Producer(own ?? { ledger: env.ledger, wake: env.wake });
    const seen = new Map<string, number>();
    const consumer = noopConsumer(env, 32, seen);
    await consumer.start();
    // Idle: the first sweep has run and nothing else is in flight.
    await waitUntil(() => consumer.counters.sweeps >= 1, 10_000, 'the first sweep');
    // A warm-up job, so each pool has its connection and the server family is known.
    await producer.enqueue({ queue: env.queue, type: 'noop', payload: { n: -1 }, ...(laned ? { lane: 'l0' } : {}) });
    await waitUntil(() => consumer.counters.completed >= 1, 10_000, 'the warm-up job');
    // Both sides' round trips happen together here: they are told apart by their statements.
    setPhase('rt:single');
    for (let i = 0; i < jobs; i++) {
      await producer.enqueue({ queue: env.queue, type: 'noop', payload: { n: i }, ...(laned ? { lane: 'l0' } : {}) });
      await waitUntil(() => consumer.counters.completed >= i + 2, 10_000, `job ${i}`);
    }
    const shapes = takePhase('rt:single');
    setPhase('rt:teardown');
    await consumer.stop();
    await verifyOnce(env, seen, jobs + 1);
    const enqueueShapes = shapes.filter((s) => s.kind === 'enqueue');
    const consumerShapes = shapes.filter((s) => s.kind !== 'enqueue');
    return row(
      sameProcess ? 'single, same process' : 'single, own producer',
      laned,
      jobs,
      enqueueShapes,
      consumerShapes,
    );
  } finally {
    await own?.wake.close();
    await own?.ledger.close();
    await env.close();
    takePhase('rt:setup');
    takePhase('rt:teardown');
  }
}
