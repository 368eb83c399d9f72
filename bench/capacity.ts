/**
 * Capacity (docs/BENCHMARKS.md, "Capacity"): what the fleet cap costs a
 * queue that uses it. 10,000 laneless items enqueued ahead are drained by 8
 * consumers of 8 slots each in one process, whose handler does nothing, in
 * four variants run alternated:
 * - uncapped (prefetching, as by default);
 * - uncapped without prefetch (a capped consumer prefetches nothing, so
 *   this isolates what the cap's own transaction costs);
 * - capped at 1,000 (never reached: only the turn on the queue's row);
 * - capped at 16 (reached all the time);
 * - the items spread over 1,000 concurrency keys with a limit of 3 per key
 *   (docs/design/keys.md, Concurrency keys): what admission and hand-on cost.
 * Items per second, the most items processing at once, from each item's
 * start and end on the ledger's clock, and the CPU an item costs during the
 * drain: this process's (every consumer) and the database server's, when it
 * runs on this machine (read from /proc; blank otherwise). On a shared
 * machine the CPU per item moves less than the rate does.
 *
 *   npm run bench:capacity
 *   npm run bench:capacity -- --runs 1 --scale 0.2
 *   npm run bench:capacity -- --only 'no prefetch,maxProcessing'   (some variants)
 *   LANEWAKE_BENCH_MYSQL_URL=mysql://root@127.0.0.1:4000 npm run bench:capacity   (TiDB)
 *   LANEWAKE_BENCH_TIDB_TXN_MODE=optimistic …   (the ledger's TiDB transaction mode; pessimistic by default)
 */
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { Consumer } from '../src/consumer/consumer.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { enqueueAhead, withFreshLedger } from './fresh-ledger.js';
import {
  benchServerUrl,
  cliFlag,
  codeRevision,
  fmt,
  median,
  printTable,
  progress,
  runBenchmark,
  serverCpuSecondsOf,
  sleep,
} from './support.js';

const RUNS = Number(cliFlag('--runs') ?? 3);
const SCALE = Number(cliFlag('--scale') ?? 1);
const ITEMS = Math.round(10_000 * SCALE);
const CONSUMERS = 8;
const SLOTS = 8;
/**
 * How long each handler call takes: 0 measures the cap's cost at its worst, a real handler's time how much of the cap's
 * room is used.
 */
const HANDLER_MS = Number(cliFlag('--handler-ms') ?? 0);

interface Variant {
  label: string;
  maxProcessing?: number;
  prefetch?: number;
  /** Items spread round-robin over this many concurrency keys, with `keyLimit` per key. */
  keys?: number;
  keyLimit?: number;
  /** The limit per key is the type's own (`setConcurrencyLimit(queue, n, { type })`), not the queue's. */
  byType?: boolean;
}
const ALL_VARIANTS: readonly Variant[] = [
  { label: 'uncapped' },
  { label: 'uncapped, no prefetch', prefetch: 0 },
  { label: 'maxProcessing 1,000 (never reached)', maxProcessing: 1000 },
  { label: 'maxProcessing 16', maxProcessing: 16 },
  { label: '1,000 concurrency keys, limit 3 per key', keys: 1000, keyLimit: 3 },
  { label: "1,000 concurrency keys, the type's own limit 3 per key", keys: 1000, keyLimit: 3, byType: true },
];
/**
 * `--only uncapped,maxProcessing`: the variants whose label contains one of these (the first kept is the baseline of
 * "vs uncapped").
 */
const ONLY = cliFlag('--only')?.split(',');
const VARIANTS = ALL_VARIANTS.filter((v) => ONLY === undefined || ONLY.some((o) => v.label.includes(o)));

interface Result {
  jobsPerS: number;
  peak: number;
  /**
   * CPU per item during the drain, in µs: this process's, and the database server's (undefined when it is not on this
   * machine).
   */
  nodeUs: number;
  serverUs: number | undefined;
}

/** The most items processing at once, from each completed item's started_at and terminal_at (ledger clock). */
async function peakProcessing(ledger: Ledger, queue: string): Promise<number> {
  const rows = await sql<{
    started_at: Date;
    terminal_at: Date;
  }>`SELECT started_at, terminal_at FROM ${ledger.tables.items}
    WHERE queue = ${queue} AND state = 'completed'`.execute(ledger.db);
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

function drain(variant: Variant): Promise<Result> {
  return withFreshLedger('lwcap', async (ledger, wake, producer) => {
    const queue = 'capacity';
    if (variant.keyLimit !== undefined)
      await ledger.setConcurrencyLimit(queue, variant.keyLimit, variant.byType === true ? { type: 't' } : {});
    const keyed = (n: number): { concurrencyKey?: string } =>
      variant.keys !== undefined ? { concurrencyKey: `tenant:${n % variant.keys}` } : {};
    await enqueueAhead(
      producer,
      Array.from({ length: ITEMS }, (_, n) => ({ queue, type: 't', payload: { n }, ...keyed(n) })),
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
          ...(variant.maxProcessing !== undefined ? { maxProcessing: variant.maxProcessing } : {}),
          ...(variant.prefetch !== undefined ? { prefetch: variant.prefetch } : {}),
          handlers: { t: HANDLER_MS > 0 ? () => sleep(HANDLER_MS) : async () => undefined },
        }),
    );
    const serverCpuBefore = serverCpuSecondsOf(benchServerUrl());
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    await Promise.all(consumers.map((c) => c.start()));
    const done = (): number => consumers.reduce((sum, c) => sum + c.counters.completed, 0);
    while (done() < ITEMS) await sleep(20);
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const serverCpuAfter = serverCpuSecondsOf(benchServerUrl());
    await Promise.all(consumers.map((c) => c.stop({ drainTimeoutMs: 5000 })));
    return {
      jobsPerS: ITEMS / seconds,
      peak: await peakProcessing(ledger, queue),
      nodeUs: (cpu.user + cpu.system) / ITEMS,
      serverUs:
        serverCpuBefore === undefined || serverCpuAfter === undefined
          ? undefined
          : ((serverCpuAfter - serverCpuBefore) * 1e6) / ITEMS,
    };
  });
}

runBenchmark(async () => {
  const runs = new Map<string, Result[]>(VARIANTS.map((v) => [v.label, []]));
  for (let r = 1; r <= RUNS; r++) {
    // Alternated, so drift on a shared machine falls on every variant alike.
    const order = r % 2 === 1 ? VARIANTS : [...VARIANTS].reverse();
    for (const variant of order) {
      const result = await drain(variant);
      runs.get(variant.label)!.push(result);
      const server = result.serverUs === undefined ? '' : `, server ${fmt(result.serverUs)} µs`;
      progress(
        `run ${r} ${variant.label}: ${fmt(result.jobsPerS)} items/s, at most ` +
          `${result.peak} processing; CPU per item: this process ${fmt(result.nodeUs)} ` +
          `µs${server}`,
      );
    }
  }
  const base = median(runs.get(VARIANTS[0]!.label)!.map((x) => x.jobsPerS));
  // The most a variant could do with handlers of HANDLER_MS: every slot it may fill busy all the time.
  const ceiling = (v: Variant): string =>
    HANDLER_MS > 0 ? fmt((Math.min(CONSUMERS * SLOTS, v.maxProcessing ?? Infinity) * 1000) / HANDLER_MS) : '';
  printTable(
    `The fleet cap: ${fmt(ITEMS)} laneless items, ${CONSUMERS} consumers × ${SLOTS} ` +
      `slots in one process, handlers of ${HANDLER_MS} ms, median of ${RUNS} run(s), ` +
      `code ${codeRevision()}`,
    [
      'variant',
      'items completed/s',
      'vs uncapped',
      ...(HANDLER_MS > 0 ? ['ceiling (slots it may fill ÷ handler time)'] : []),
      'most processing at once',
      'CPU µs/item: this process',
      'server',
    ],
    VARIANTS.map((v) => {
      const xs = runs.get(v.label)!;
      const rate = median(xs.map((x) => x.jobsPerS));
      const server = xs.every((x) => x.serverUs !== undefined) ? fmt(median(xs.map((x) => x.serverUs!))) : '';
      return [
        v.label,
        fmt(rate),
        `${fmt((rate / base) * 100)}%`,
        ...(HANDLER_MS > 0 ? [ceiling(v)] : []),
        String(Math.max(...xs.map((x) => x.peak))),
        fmt(median(xs.map((x) => x.nodeUs))),
        server,
      ];
    }),
    ['left', 'right', 'right', ...(HANDLER_MS > 0 ? (['right'] as const) : []), 'right', 'right', 'right'],
  );
});
