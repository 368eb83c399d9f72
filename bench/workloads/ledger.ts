/**
 * The ledger alone (docs/BENCHMARKS.md, "The benchmarks"): batched enqueue, claim + completeMany until the queue is
 * empty (own lanes, and 1,000 shared lanes, by `--claimers` loops of limit 32), and single claims with and without
 * one deep lane. `--only enqueue,own,shared,latency` picks the variants. A drain that loses an item, completes one
 * twice or breaks lane order throws: a failure, never a number.
 */
import { sql } from 'kysely';
import type { EnqueueInput, Ledger } from '../../src/index.js';
import { cliFlag, fmt, median, minMax, percentile } from '../support.js';
import { defineWorkload, numFlag, scaled, withFreshLedger } from '../workload.js';
import { drainByClaims, LEASE_MS, QUEUE } from './ledger-drain.js';

const SHARED_LANES = 1_000;
const BATCH = 500;
const CLAIMERS = numFlag('--claimers', 4);
const LATENCY_SAMPLES = Math.max(50, scaled(500));
const LATENCY_HEADS = Math.max(scaled(2_000), LATENCY_SAMPLES + 120);
const DEEP_LANE = Math.max(1_000, scaled(100_000));
const COMPLETE_PROBES = 10;

type Variant = 'enqueue' | 'own' | 'shared' | 'latency';
const ONLY = (cliFlag('--only') ?? 'enqueue,own,shared,latency').split(',');
/** A measurement's figures, by `name (unit)`. */
type Figures = Record<string, number>;

/** ~100 bytes of JSON, the size of a typical "do X to entity Y" job. */
const inputs = (count: number, lanes: number | null, lane?: string): EnqueueInput[] =>
  Array.from({ length: count }, (_, i) => ({
    queue: QUEUE,
    type: 'noop',
    payload: { n: i, entity: `acct_${(i * 2_654_435_761) % 1_000_003}`.padEnd(40, '0'), op: 'sync' },
    ...(lane !== undefined ? { lane } : lanes !== null ? { lane: `lane-${String(i % lanes).padStart(4, '0')}` } : {}),
  }));

async function enqueueAll(ledger: Ledger, items: readonly EnqueueInput[], batch = BATCH): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < items.length; i += batch) await ledger.enqueueMany(items.slice(i, i + batch));
  return items.length / ((performance.now() - t0) / 1000);
}

const fresh = <T>(run: (ledger: Ledger) => Promise<T>): Promise<T> =>
  withFreshLedger('lwb', ({ ledger }) => run(ledger), 2);

async function enqueue(): Promise<Figures> {
  const count = Math.max(1_000, scaled(50_000));
  const own = await fresh(async (l) => (await l.now(), enqueueAll(l, inputs(count, null))));
  const shared = await fresh(async (l) => (await l.now(), enqueueAll(l, inputs(count, SHARED_LANES))));
  return { 'own lanes (items/s)': own, [`${fmt(SHARED_LANES)} shared lanes (items/s)`]: shared };
}

const drain = (lanes: number | null) => (): Promise<Figures> =>
  fresh(async (ledger) => {
    const count = Math.max(1_000, scaled(40_000));
    await enqueueAll(ledger, inputs(count, lanes));
    const d = await drainByClaims(ledger, count, lanes, CLAIMERS);
    return { 'claim+complete (items/s)': d.itemsS, 'node (µs/item)': d.nodeUs, 'server (µs/item)': d.serverUs };
  });

/** A: `heads` own-lane items; B: one deep lane enqueued first, then the same heads. Claims alternate A B B A. */
const latency = (): Promise<Figures> =>
  fresh((a) =>
    fresh(async (b) => {
      await enqueueAll(a, inputs(LATENCY_HEADS, null));
      const deepItemsS = await enqueueAll(b, inputs(DEEP_LANE, null, 'deep'), 1_000);
      await enqueueAll(b, inputs(LATENCY_HEADS, null));
      const one = async (l: Ledger, record: number[] | null): Promise<void> => {
        const t0 = performance.now();
        const c = await l.claim({ queue: QUEUE, owner: 'bench-latency', limit: 1, leaseMs: LEASE_MS });
        if (record !== null) record.push(performance.now() - t0);
        const [done] = await l.completeMany(c.items.map((handle) => ({ handle })));
        if (c.items.length !== 1 || done?.won !== true) throw new Error('a claim of a full queue won nothing');
      };
      for (let i = 0; i < 20; i++) for (const l of [a, b]) await one(l, null);
      const without: number[] = [];
      const deep: number[] = [];
      for (let i = 0; i < LATENCY_SAMPLES; i++) {
        const pair: [Ledger, number[]][] = [
          [a, without],
          [b, deep],
        ];
        for (const [l, rec] of i % 2 === 0 ? pair : pair.reverse()) await one(l, rec);
      }
      // complete() (the single-item path) of a lane head, short lane and deep: it must not depend on the depth.
      await enqueueAll(a, inputs(COMPLETE_PROBES + 1, null, 'short'));
      const complete: Record<string, number[]> = { short: [], deep: [] };
      for (let i = 0; i < COMPLETE_PROBES; i++) {
        for (const [l, lane] of [
          [a, 'short'],
          [b, 'deep'],
        ] as const) {
          const head = await sql<{ id: string }>`SELECT id FROM ${l.tables.items} WHERE queue = ${QUEUE}
            AND lane = ${lane} AND state = 'pending' AND is_head = 1 ORDER BY lane_seq LIMIT 1`.execute(l.db);
          const ids = head.rows.map((r) => r.id);
          const [item] = await l.claimByIds({ queue: QUEUE, owner: 'bench-latency', leaseMs: LEASE_MS, ids });
          if (item === undefined) throw new Error(`lane ${lane}: no head claimed`);
          const t0 = performance.now();
          if (!(await l.complete(item)).won) throw new Error(`complete lost its CAS for ${item.id}`);
          complete[lane]!.push(performance.now() - t0);
        }
      }
      return {
        'claim(limit 1) p50, no deep lane (ms)': percentile(without, 50),
        'claim(limit 1) p99, no deep lane (ms)': percentile(without, 99),
        [`claim(limit 1) p50, a ${fmt(DEEP_LANE)}-item lane (ms)`]: percentile(deep, 50),
        [`claim(limit 1) p99, a ${fmt(DEEP_LANE)}-item lane (ms)`]: percentile(deep, 99),
        'deep-lane claim ratio, p50 with / without (×)': percentile(deep, 50) / percentile(without, 50),
        'enqueue, one lane, batches of 1,000 (items/s)': deepItemsS,
        'complete() of a short lane head, p50 (ms)': percentile(complete.short!, 50),
        "complete() of the deep lane's head, p50 (ms)": percentile(complete.deep!, 50),
      };
    }),
  );

const MEASURES: Record<Variant, { label: string; measure: () => Promise<Figures> }> = {
  enqueue: { label: `enqueue, batches of ${BATCH}`, measure: enqueue },
  own: { label: `own lanes, ${CLAIMERS} claimers × limit 32`, measure: drain(null) },
  shared: { label: `${fmt(SHARED_LANES)} shared lanes, ${CLAIMERS} claimers × limit 32`, measure: drain(SHARED_LANES) },
  latency: { label: 'single claims', measure: latency },
};

const figure = (v: number): string => fmt(v, v < 100 ? 2 : 0);

export default defineWorkload<Variant, Figures>({
  about: 'the ledger alone: batched enqueue, claim+complete in own and shared lanes, claim latency beside a deep lane',
  variants: (Object.keys(MEASURES) as Variant[]).filter((v) => ONLY.includes(v)),
  label: (v) => MEASURES[v].label,
  measure: (v) => MEASURES[v].measure(),
  line: (_, r) =>
    Object.entries(r)
      .map(([k, v]) => `${k} ${figure(v)}`)
      .join('; '),
  report: (of, runs) => [
    {
      title: `the ledger alone, median of ${runs} run(s)`,
      headers: ['variant', 'measurement', 'median', 'min–max'],
      rows: (Object.keys(MEASURES) as Variant[])
        .filter((v) => ONLY.includes(v))
        .flatMap((v) =>
          Object.keys(of(v)[0] ?? {}).map((k) => {
            const values = of(v).map((r) => r[k] ?? Number.NaN);
            const { min, max } = minMax(values);
            return [MEASURES[v].label, k, figure(median(values)), `${figure(min)}–${figure(max)}`];
          }),
        ),
      align: ['left', 'left', 'right', 'right'],
    },
  ],
});
