/**
 * Fairness (docs/BENCHMARKS.md, "Capacity"): tenant A floods the queue with
 * 100,000 items (keyed `A`) over 1,000 lanes, and in a second shape over
 * 5,000 lanes; 4 consumers of 8 slots each drain it in one process, their
 * handler taking 1 ms. Once A has been running for a second, tenant B
 * enqueues 10 laneless items (keyed `B`). Reported: B's enqueue→start p50
 * and p99 (created_at to started_at, on the ledger's clock), with the queue
 * fair (`fairness: 'key'`) and oldest first, and the whole drain's items per
 * second, fair against oldest first. Variants alternate between runs.
 *
 *   npm run bench:fairness
 *   npm run bench:fairness -- --runs 1 --scale 0.2
 *   LANEWAKE_BENCH_MYSQL_URL=mysql://root@127.0.0.1:4000 npm run bench:fairness   (TiDB)
 */
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { Consumer } from '../src/consumer/consumer.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
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
const FLOOD = Math.round(100_000 * SCALE);
const B_ITEMS = 10;
const CONSUMERS = 4;
const SLOTS = 8;
const HANDLER_MS = Number(cliFlag('--handler-ms') ?? 1);
const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

interface Variant {
  label: string;
  lanes: number;
  fair: boolean;
}
const VARIANTS: readonly Variant[] = [1000, 5000].flatMap((lanes) => [
  { label: `${fmt(lanes)} lanes, fair`, lanes, fair: true },
  { label: `${fmt(lanes)} lanes, oldest first`, lanes, fair: false },
]);

interface Result {
  bWaitMs: number[];
  jobsPerS: number;
}

function run(variant: Variant): Promise<Result> {
  return withFreshLedger('lwfair', async (ledger, wake, producer) => {
    const queue = 'fairness';
    if (variant.fair) await ledger.setFairness(queue, 'key');
    const lanes = Math.min(variant.lanes, FLOOD);
    await enqueueAhead(
      producer,
      Array.from({ length: FLOOD }, (_, n) => ({
        queue,
        type: 't',
        lane: `a${n % lanes}`,
        concurrencyKey: 'A',
        payload: { n },
      })),
    );
    const consumers = Array.from(
      { length: CONSUMERS },
      () =>
        new Consumer({
          ledger,
          wake,
          queue,
          concurrency: SLOTS,
          logger: createLogger('bench', 'silent'),
          handlers: { t: () => sleep(HANDLER_MS) },
        }),
    );
    const started = performance.now();
    await Promise.all(consumers.map((c) => c.start()));
    await sleep(1000);
    // B's producer is another process's: its wake-ups go through Redis, nothing is claimed for a consumer at insert.
    const remote = new WakeChannel({ redis: REDIS_URL, keyPrefix: wake.keyPrefix });
    try {
      await new Producer({ ledger, wake: remote }).enqueueMany(
        Array.from({ length: B_ITEMS }, (_, n) => ({ queue, type: 't', concurrencyKey: 'B', payload: { n } })),
      );
    } finally {
      await remote.close();
    }
    const done = (): number => consumers.reduce((sum, c) => sum + c.counters.completed, 0);
    while (done() < FLOOD + B_ITEMS) await sleep(20);
    const seconds = (performance.now() - started) / 1000;
    await Promise.all(consumers.map((c) => c.stop({ drainTimeoutMs: 5000 })));
    const b = await sql<{
      wait_us: number | string;
    }>`SELECT TIMESTAMPDIFF(MICROSECOND, created_at, started_at) AS wait_us
      FROM ${ledger.tables.items} WHERE queue = ${queue} AND concurrency_key = 'B'`.execute(ledger.db);
    return { bWaitMs: b.rows.map((r) => Number(r.wait_us) / 1000), jobsPerS: (FLOOD + B_ITEMS) / seconds };
  });
}

runBenchmark(async () => {
  const runs = new Map<string, Result[]>(VARIANTS.map((v) => [v.label, []]));
  for (let r = 1; r <= RUNS; r++) {
    const order = r % 2 === 1 ? VARIANTS : [...VARIANTS].reverse();
    for (const variant of order) {
      const result = await run(variant);
      runs.get(variant.label)!.push(result);
      progress(
        `run ${r} ${variant.label}: B p50 ${fmt(percentile(result.bWaitMs, 50), 1)} ms, ` +
          `p99 ${fmt(percentile(result.bWaitMs, 99), 1)} ms, ${fmt(result.jobsPerS)} ` +
          `items/s`,
      );
    }
  }
  printTable(
    `Fairness: A floods ${fmt(FLOOD)} items over its lanes, B enqueues ${B_ITEMS} ` +
      `after 1 s; ${CONSUMERS} consumers × ${SLOTS} slots, ${HANDLER_MS} ms handlers; ` +
      `median of ${RUNS} run(s), code ${codeRevision()}`,
    ['variant', "B's enqueue→start p50 (ms)", 'p99 (ms)', 'items/s (whole drain)', 'vs oldest first'],
    VARIANTS.map((v) => {
      const xs = runs.get(v.label)!;
      const rate = median(xs.map((x) => x.jobsPerS));
      const other = median(
        runs.get(`${fmt(v.lanes)} lanes, ${v.fair ? 'oldest first' : 'fair'}`)!.map((x) => x.jobsPerS),
      );
      const base = v.fair ? other : rate;
      return [
        v.label,
        fmt(median(xs.map((x) => percentile(x.bWaitMs, 50))), 1),
        fmt(median(xs.map((x) => percentile(x.bWaitMs, 99))), 1),
        fmt(rate),
        `${fmt((rate / base) * 100)}%`,
      ];
    }),
    ['left', 'right', 'right', 'right', 'right'],
  );
});
