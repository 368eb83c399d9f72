/**
 * Reserved capacity (docs/BENCHMARKS.md, "Capacity"): 200 interactive items arriving at 50/s, their
 * enqueue→start (from the producer's call to the handler's start, one process) on an idle queue and while 50,000
 * bulk items enqueued just before drain (5 ms a handler call), with `pools: auto` and without pools. One process,
 * concurrency 16.
 */
import { sql } from 'kysely';
import { Consumer } from '../../src/consumer/consumer.js';
import { poolConsumers } from '../../src/consumer/pools.js';
import { codeRevision, fmt, median, percentile, sleep } from '../support.js';
import { defineWorkload, enqueueMade, scaled, silent, withFreshLedger } from '../workload.js';

const BULK = scaled(50_000);
const INTERACTIVE = 200;
const EVERY_MS = 20;
const CONCURRENCY = 16;
const BULK_HANDLER_MS = 5;

type Variant = 'idle, pools' | 'flood, pools' | 'flood, no pools';
interface Result {
  p50: number;
  p99: number;
  /** Bulk items not yet started when the last interactive item started: the flood was still on. */
  bulkLeft: number;
}

export default defineWorkload<Variant, Result>({
  about: 'interactive items beside a bulk flood, with and without reserved pools (Capacity)',
  variants: ['idle, pools', 'flood, pools', 'flood, no pools'],
  label: (v) => v,
  measure: (v) =>
    withFreshLedger('lwclass', async ({ ledger, wake, producer }) => {
      const queue = 'classes';
      const enqueuedAt = new Map<number, number>();
      const startMs: number[] = [];
      const handlers = {
        bulk: () => sleep(BULK_HANDLER_MS),
        interactive: async (job: { payload: { i: number } }) =>
          void startMs.push(performance.now() - (enqueuedAt.get(job.payload.i) ?? NaN)),
      };
      const base = { ledger, wake, queue, concurrency: CONCURRENCY, logger: silent, handlers };
      const cs = v.endsWith('no pools') ? [new Consumer(base)] : poolConsumers({ ...base, pools: 'auto' });
      for (const c of cs) await c.start();
      const flood = v.startsWith('flood');
      if (flood)
        await enqueueMade(producer, BULK, (i) => ({ queue, type: 'bulk', queueClass: 'bulk', payload: { i } }));
      for (let i = 0; i < INTERACTIVE; i++) {
        const at = performance.now();
        enqueuedAt.set(i, at);
        void producer.enqueue({ queue, type: 'interactive', queueClass: 'interactive', payload: { i } });
        await sleep(Math.max(0, EVERY_MS - (performance.now() - at)));
      }
      while (startMs.length < INTERACTIVE) await sleep(50);
      const started = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items}
        WHERE queue = ${queue} AND type = 'bulk' AND started_at > '1970-01-02'`.execute(ledger.db);
      const bulkLeft = flood ? BULK - Number(started.rows[0]?.n ?? 0) : 0;
      await Promise.all(cs.map((c) => c.stop({ drainTimeoutMs: 1000 })));
      return { p50: percentile(startMs, 50), p99: percentile(startMs, 99), bulkLeft };
    }),
  line: (_, r) =>
    `interactive enqueue→start p50 ${fmt(r.p50, 1)} ms, p99 ${fmt(r.p99, 1)} ms, ` +
    `${fmt(r.bulkLeft)} bulk items not started yet`,
  report: (of, runs) => {
    const idleP99 = median(of('idle, pools').map((x) => x.p99));
    const variants: Variant[] = ['idle, pools', 'flood, pools', 'flood, no pools'];
    return [
      {
        title:
          `Reserved capacity: ${INTERACTIVE} interactive items at 50/s, beside ${fmt(BULK)} bulk items ` +
          `(${BULK_HANDLER_MS} ms each) or none, concurrency ${CONCURRENCY} in one process, median of ${runs} ` +
          `run(s), code ${codeRevision()}`,
        headers: [
          'variant',
          'interactive enqueue→start p50 (ms)',
          'p99 (ms)',
          'p99 ÷ idle p99',
          'bulk not started when the last interactive started',
        ],
        rows: variants.map((v) => {
          const p99 = median(of(v).map((x) => x.p99));
          return [
            v,
            fmt(median(of(v).map((x) => x.p50)), 1),
            fmt(p99, 1),
            `${fmt(p99 / idleP99, 1)}×`,
            v.startsWith('flood') ? fmt(median(of(v).map((x) => x.bulkLeft))) : '-',
          ];
        }),
        align: ['left', 'right', 'right', 'right', 'right'],
      },
    ];
  },
});
