/**
 * Fairness (docs/BENCHMARKS.md, "Capacity"): tenant A floods the queue with 100,000 items (keyed `A`) over 1,000
 * lanes, and in a second shape over 5,000; 4 consumers × 8 slots drain it in one process, 1 ms handlers. A second
 * after the start, tenant B enqueues 10 laneless items (keyed `B`) from a producer with a channel of its own.
 * B's enqueue→start p50/p99 (ledger clock), fair (`fairness: 'key'`) and oldest first, and the whole drain's rate.
 */
import { sql } from 'kysely';
import { Producer } from '../../src/producer/producer.js';
import { WakeChannel } from '../../src/wake/wake-channel.js';
import { codeRevision, fmt, median, percentile, sleep } from '../support.js';
import {
  consumers,
  defineWorkload,
  drain,
  enqueueMade,
  numFlag,
  REDIS_URL,
  scaled,
  withFreshLedger,
} from '../workload.js';

const FLOOD = scaled(100_000);
const B_ITEMS = 10;
const CONSUMERS = 4;
const SLOTS = 8;
const HANDLER_MS = numFlag('--handler-ms', 1);

interface Variant {
  label: string;
  lanes: number;
  fair: boolean;
}
interface Result {
  bWaitMs: number[];
  jobsPerS: number;
}
const variants: readonly Variant[] = [1000, 5000].flatMap((lanes) => [
  { label: `${fmt(lanes)} lanes, fair`, lanes, fair: true },
  { label: `${fmt(lanes)} lanes, oldest first`, lanes, fair: false },
]);

export default defineWorkload<Variant, Result>({
  about: "a tenant's flood over many lanes and another's few items, fair and oldest first (Capacity)",
  variants,
  label: (v) => v.label,
  measure: (v) =>
    withFreshLedger('lwfair', async (env) => {
      const queue = 'fairness';
      if (v.fair) await env.ledger.setFairness(queue, 'key');
      const lanes = Math.min(v.lanes, FLOOD);
      await enqueueMade(env.producer, FLOOD, (n) => ({
        queue,
        type: 't',
        lane: `a${n % lanes}`,
        concurrencyKey: 'A',
        payload: { n },
      }));
      const cs = consumers(env, CONSUMERS, { queue, concurrency: SLOTS, handlers: { t: () => sleep(HANDLER_MS) } });
      const during = async (): Promise<void> => {
        await sleep(1000);
        // B's producer is another process's: its wake-ups go through Redis, nothing is claimed at insert.
        const remote = new WakeChannel({ redis: REDIS_URL, keyPrefix: env.wake.keyPrefix });
        try {
          await new Producer({ ledger: env.ledger, wake: remote }).enqueueMany(
            Array.from({ length: B_ITEMS }, (_, n) => ({ queue, type: 't', concurrencyKey: 'B', payload: { n } })),
          );
        } finally {
          await remote.close();
        }
      };
      const { seconds } = await drain(cs, FLOOD + B_ITEMS, { during });
      const b = await sql<{ wait_us: number | string }>`SELECT TIMESTAMPDIFF(MICROSECOND, created_at, started_at)
        AS wait_us FROM ${env.ledger.tables.items} WHERE queue = ${queue} AND concurrency_key = 'B'`.execute(
        env.ledger.db,
      );
      return { bWaitMs: b.rows.map((r) => Number(r.wait_us) / 1000), jobsPerS: (FLOOD + B_ITEMS) / seconds };
    }),
  line: (_, r) =>
    `B p50 ${fmt(percentile(r.bWaitMs, 50), 1)} ms, p99 ${fmt(percentile(r.bWaitMs, 99), 1)} ms, ` +
    `${fmt(r.jobsPerS)} items/s`,
  report: (of, runs) => {
    const rate = (v: Variant): number => median(of(v).map((x) => x.jobsPerS));
    const oldestFirst = (v: Variant): Variant => variants.find((o) => o.lanes === v.lanes && !o.fair)!;
    return [
      {
        title:
          `Fairness: A floods ${fmt(FLOOD)} items over its lanes, B enqueues ${B_ITEMS} after 1 s; ${CONSUMERS} ` +
          `consumers × ${SLOTS} slots, ${HANDLER_MS} ms handlers; median of ${runs} run(s), code ${codeRevision()}`,
        headers: ['variant', "B's enqueue→start p50 (ms)", 'p99 (ms)', 'items/s (whole drain)', 'vs oldest first'],
        rows: variants.map((v) => [
          v.label,
          fmt(median(of(v).map((x) => percentile(x.bWaitMs, 50))), 1),
          fmt(median(of(v).map((x) => percentile(x.bWaitMs, 99))), 1),
          fmt(rate(v)),
          `${fmt((rate(v) / rate(oldestFirst(v))) * 100)}%`,
        ]),
        align: ['left', 'right', 'right', 'right', 'right'],
      },
    ];
  },
});
