/**
 * Reserved capacity (docs/BENCHMARKS.md, "Capacity"): interactive items
 * arriving at 50/s for 4 s, their enqueue→start (from the producer's call
 * to the handler's start, one process) on an idle queue and while 50,000 bulk items
 * enqueued just before drain (5 ms a handler call), with `pools: auto` and
 * without pools. One process, concurrency 16, run alternated.
 *
 *   npm run bench:classes
 *   npm run bench:classes -- --runs 1 --scale 0.2
 */
import { sql } from 'kysely';
import { Consumer } from '../src/consumer/consumer.js';
import { poolConsumers } from '../src/consumer/pools.js';
import { createLogger } from '../src/log.js';
import { enqueueAhead, withFreshLedger } from './fresh-ledger.js';
import {
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
const SCALE = Number(cliFlag('--scale') ?? 1);
const BULK = Math.round(50_000 * SCALE);
const INTERACTIVE = 200;
const INTERACTIVE_EVERY_MS = 20;
const CONCURRENCY = 16;
const BULK_HANDLER_MS = 5;

type Variant = 'idle, pools' | 'flood, pools' | 'flood, no pools';
const VARIANTS: readonly Variant[] = ['idle, pools', 'flood, pools', 'flood, no pools'];

interface Result {
  p50: number;
  p99: number;
  /** Bulk items not yet started when the last interactive item started: the flood was still on. */
  bulkLeft: number;
}

function run(variant: Variant): Promise<Result> {
  return withFreshLedger('lwclass', async (ledger, wake, producer) => {
    const queue = 'classes';
    const logger = createLogger('bench', 'silent');
    const enqueuedAt = new Map<number, number>();
    const startMs: number[] = [];
    const handlers = {
      bulk: () => sleep(BULK_HANDLER_MS),
      interactive: async (job: { payload: { i: number } }) =>
        void startMs.push(performance.now() - (enqueuedAt.get(job.payload.i) ?? NaN)),
    };
    const consumers: Consumer[] = variant.endsWith('no pools')
      ? [new Consumer({ ledger, wake, queue, concurrency: CONCURRENCY, logger, handlers })]
      : poolConsumers({ ledger, wake, queue, concurrency: CONCURRENCY, pools: 'auto', logger, handlers });
    for (const c of consumers) await c.start();
    if (variant.startsWith('flood')) {
      await enqueueAhead(
        producer,
        Array.from({ length: BULK }, (_, i) => ({ queue, type: 'bulk', queueClass: 'bulk' as const, payload: { i } })),
      );
    }
    for (let i = 0; i < INTERACTIVE; i++) {
      const at = performance.now();
      enqueuedAt.set(i, at);
      void producer.enqueue({ queue, type: 'interactive', queueClass: 'interactive', payload: { i } });
      await sleep(Math.max(0, INTERACTIVE_EVERY_MS - (performance.now() - at)));
    }
    const startedCount = async (type: string): Promise<number> => {
      const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items}
        WHERE queue = ${queue} AND type = ${type} AND started_at > '1970-01-02'`.execute(ledger.db);
      return Number(r.rows[0]?.n ?? 0);
    };
    while (startMs.length < INTERACTIVE) await sleep(50);
    const bulkLeft = variant.startsWith('flood') ? BULK - (await startedCount('bulk')) : 0;
    await Promise.all(consumers.map((c) => c.stop({ drainTimeoutMs: 1000 })));
    return { p50: percentile(startMs, 50), p99: percentile(startMs, 99), bulkLeft };
  });
}

runBenchmark(async () => {
  const results = new Map<Variant, Result[]>(VARIANTS.map((v) => [v, []]));
  for (let r = 1; r <= RUNS; r++) {
    for (const variant of r % 2 === 1 ? VARIANTS : [...VARIANTS].reverse()) {
      const result = await run(variant);
      results.get(variant)!.push(result);
      progress(
        `run ${r} ${variant}: interactive enqueue→start p50 ${fmt(result.p50, 1)} ms, ` +
          `p99 ${fmt(result.p99, 1)} ms, ${fmt(result.bulkLeft)} bulk items not started yet`,
      );
    }
  }
  const idleP99 = median(results.get('idle, pools')!.map((x) => x.p99));
  printTable(
    `Reserved capacity: ${INTERACTIVE} interactive items at 50/s, beside ` +
      `${fmt(BULK)} bulk items (${BULK_HANDLER_MS} ms each) or none, concurrency ` +
      `${CONCURRENCY} in one process, median of ${RUNS} run(s), code ${codeRevision()}`,
    [
      'variant',
      'interactive enqueue→start p50 (ms)',
      'p99 (ms)',
      'p99 ÷ idle p99',
      'bulk not started when the last interactive started',
    ],
    VARIANTS.map((v) => {
      const xs = results.get(v)!;
      const p99 = median(xs.map((x) => x.p99));
      return [
        v,
        fmt(median(xs.map((x) => x.p50)), 1),
        fmt(p99, 1),
        `${fmt(p99 / idleP99, 1)}×`,
        v.startsWith('flood') ? fmt(median(xs.map((x) => x.bulkLeft))) : '-',
      ];
    }),
    ['left', 'right', 'right', 'right', 'right'],
  );
});
