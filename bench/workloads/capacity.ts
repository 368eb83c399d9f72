/**
 * Capacity (docs/BENCHMARKS.md, "Capacity"): what the fleet cap and concurrency keys cost a queue that uses them.
 * 10,000 laneless items enqueued ahead, drained by 8 consumers × 8 slots in one process, no-op handlers (or
 * `--handler-ms`). Items/s, the most items processing at once (from each item's start and end on the ledger's
 * clock) and CPU per item: this process's, and the SQL server's when it runs here (/proc).
 * `--only 'no prefetch,maxProcessing'` keeps the variants whose label holds one of these (the first is the
 * baseline of "vs uncapped"). TiDB: LANEWAKE_BENCH_MYSQL_URL=mysql://root@127.0.0.1:4000 (and
 * LANEWAKE_BENCH_TIDB_TXN_MODE=optimistic for that mode).
 */
import { sql } from 'kysely';
import type { Ledger } from '../../src/ledger/ledger.js';
import { cliFlag, codeRevision, fmt, median, sleep } from '../support.js';
import {
  consumers,
  defineWorkload,
  drain,
  type Drained,
  enqueueMade,
  numFlag,
  scaled,
  withFreshLedger,
} from '../workload.js';

const ITEMS = scaled(10_000);
const CONSUMERS = 8;
const SLOTS = 8;
const HANDLER_MS = numFlag('--handler-ms', 0);

interface Variant {
  label: string;
  maxProcessing?: number;
  prefetch?: number;
  /** Items spread round-robin over this many concurrency keys, with `keyLimit` per key (the type's own limit). */
  keys?: number;
  keyLimit?: number;
  byType?: boolean;
}
const ALL: readonly Variant[] = [
  { label: 'uncapped' },
  { label: 'uncapped, no prefetch', prefetch: 0 },
  { label: 'maxProcessing 1,000 (never reached)', maxProcessing: 1000 },
  { label: 'maxProcessing 16', maxProcessing: 16 },
  { label: '1,000 concurrency keys, limit 3 per key', keys: 1000, keyLimit: 3 },
  { label: "1,000 concurrency keys, the type's own limit 3 per key", keys: 1000, keyLimit: 3, byType: true },
];
const ONLY = cliFlag('--only')?.split(',');

/** The most items processing at once, from each completed item's started_at and terminal_at (ledger clock). */
async function peakProcessing(ledger: Ledger, queue: string): Promise<number> {
  const rows = await sql<{ started_at: Date; terminal_at: Date }>`SELECT started_at, terminal_at
    FROM ${ledger.tables.items} WHERE queue = ${queue} AND state = 'completed'`.execute(ledger.db);
  const events = rows.rows.flatMap((r) => [
    { at: r.started_at.getTime(), d: 1 },
    { at: r.terminal_at.getTime(), d: -1 },
  ]);
  events.sort((a, b) => a.at - b.at || a.d - b.d);
  let now = 0;
  let peak = 0;
  for (const e of events) peak = Math.max(peak, (now += e.d));
  return peak;
}

const variants = ALL.filter((v) => ONLY === undefined || ONLY.some((o) => v.label.includes(o)));

export default defineWorkload<Variant, Drained & { peak: number }>({
  about: 'the fleet cap and concurrency keys: 8 consumers × 8 slots draining 10,000 items (Capacity)',
  variants,
  label: (v) => v.label,
  measure: (v) =>
    withFreshLedger('lwcap', async (env) => {
      const queue = 'capacity';
      if (v.keyLimit !== undefined)
        await env.ledger.setConcurrencyLimit(queue, v.keyLimit, v.byType === true ? { type: 't' } : {});
      await enqueueMade(env.producer, ITEMS, (n) => ({
        queue,
        type: 't',
        payload: { n },
        ...(v.keys !== undefined ? { concurrencyKey: `tenant:${n % v.keys}` } : {}),
      }));
      const cs = consumers(env, CONSUMERS, {
        queue,
        concurrency: SLOTS,
        ...(v.maxProcessing !== undefined ? { maxProcessing: v.maxProcessing } : {}),
        ...(v.prefetch !== undefined ? { prefetch: v.prefetch } : {}),
        handlers: { t: HANDLER_MS > 0 ? () => sleep(HANDLER_MS) : async () => undefined },
      });
      return { ...(await drain(cs, ITEMS)), peak: await peakProcessing(env.ledger, queue) };
    }),
  line: (_, r) =>
    `${fmt(ITEMS / r.seconds)} items/s, at most ${r.peak} processing; CPU per item: this process ` +
    `${fmt(r.nodeUs)} µs${r.serverUs === undefined ? '' : `, server ${fmt(r.serverUs)} µs`}`,
  report: (of, runs) => {
    const rate = (v: Variant): number => median(of(v).map((x) => ITEMS / x.seconds));
    const base = rate(variants[0]!);
    // The most a variant could do with handlers of HANDLER_MS: every slot it may fill busy all the time.
    const timed = HANDLER_MS > 0;
    const ceiling = (v: Variant): string[] =>
      timed ? [fmt((Math.min(CONSUMERS * SLOTS, v.maxProcessing ?? Infinity) * 1000) / HANDLER_MS)] : [];
    return [
      {
        title:
          `The fleet cap: ${fmt(ITEMS)} laneless items, ${CONSUMERS} consumers × ${SLOTS} slots in one process, ` +
          `handlers of ${HANDLER_MS} ms, median of ${runs} run(s), code ${codeRevision()}`,
        headers: [
          'variant',
          'items completed/s',
          'vs uncapped',
          ...(timed ? ['ceiling (slots it may fill ÷ handler time)'] : []),
          'most processing at once',
          'CPU µs/item: this process',
          'server',
        ],
        rows: variants.map((v) => {
          const xs = of(v);
          return [
            v.label,
            fmt(rate(v)),
            `${fmt((rate(v) / base) * 100)}%`,
            ...ceiling(v),
            String(Math.max(...xs.map((x) => x.peak))),
            fmt(median(xs.map((x) => x.nodeUs))),
            xs.every((x) => x.serverUs !== undefined) ? fmt(median(xs.map((x) => x.serverUs!))) : '',
          ];
        }),
        align: ['left', 'right', 'right', ...(timed ? (['right'] as const) : []), 'right', 'right', 'right'],
      },
    ];
  },
});
