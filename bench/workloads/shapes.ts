/**
 * Handler shapes (docs/BENCHMARKS.md, "Handler shapes"), each beside the same workload run one item per call:
 * - coalescing: 20,000 updates over 100 keys (one lane per key), enqueued ahead, one consumer at concurrency 32
 *   whose handler coalesces with `latest`. Handler calls and items/s; each run checks that the last call of each
 *   key saw its newest update.
 * - batches: 20,000 laneless items enqueued ahead, one consumer at concurrency 32 writing one row per item
 *   through ctx.transaction: a batch handler (max 32, maxWaitMs 20) inserts its batch's rows in one statement and
 *   completes them in the same transaction. Items/s, and the statements and round trips the consumer sent per
 *   item (counted at the driver, bench/sql-count.ts).
 */
import { sql } from 'kysely';
import { defineBatchHandler } from '../../src/consumer/batches.js';
import { defineHandler } from '../../src/consumer/types.js';
import { installRoundTripCounter, setPhase, takePhase } from '../sql-count.js';
import { codeRevision, fmt, median } from '../support.js';
import { consumers, defineWorkload, drain, enqueueMade, type Fresh, scaled, withFreshLedger } from '../workload.js';

const ITEMS = scaled(20_000);
const KEYS = 100;

type Variant = 'latest' | 'plain' | 'batched' | 'single';
interface Result {
  jobsPerS: number;
  calls: number;
  statementsPerItem: number;
  roundTripsPerItem: number;
}

async function coalesce(env: Fresh, latest: boolean): Promise<Result> {
  const queue = 'shapes';
  await enqueueMade(env.producer, ITEMS, (n) => ({
    queue,
    type: 'upd',
    lane: `key:${n % KEYS}`,
    payload: { key: n % KEYS, n },
  }));
  let calls = 0;
  const newestSeen = new Map<number, number>();
  const handle = async (job: { payload: { key: number; n: number } }): Promise<void> => {
    calls++;
    newestSeen.set(job.payload.key, Math.max(newestSeen.get(job.payload.key) ?? -1, job.payload.n));
  };
  const upd = latest ? defineHandler<{ key: number; n: number }>({ coalesce: 'latest', handle }) : handle;
  const done = async (): Promise<number> => {
    const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${env.ledger.tables.items}
      WHERE state = 'completed'`.execute(env.ledger.db);
    return Number(r.rows[0]?.n ?? 0);
  };
  const { seconds } = await drain(consumers(env, 1, { queue, concurrency: 32, handlers: { upd } }), ITEMS, {
    done,
    pollMs: 50,
  });
  for (let key = 0; key < KEYS; key++) {
    const newest = ITEMS - KEYS + key;
    if (newestSeen.get(key) !== newest)
      throw new Error(`key ${key}: the last call saw update ${newestSeen.get(key)}, not the newest (${newest})`);
  }
  return { calls, jobsPerS: ITEMS / seconds, statementsPerItem: NaN, roundTripsPerItem: NaN };
}

async function writes(env: Fresh, batched: boolean): Promise<Result> {
  const { ledger, producer } = env;
  await sql`CREATE TABLE writes (item_id VARCHAR(32) NOT NULL PRIMARY KEY, n INT NOT NULL)`.execute(ledger.db);
  const queue = 'batches';
  await enqueueMade(producer, ITEMS, (n) => ({ queue, type: 'write', payload: { n } }));
  const write = batched
    ? defineBatchHandler<{ n: number }>({
        batch: { max: 32, maxWaitMs: 20 },
        handle: (jobs, ctx) =>
          ctx.transaction(async (trx) => {
            const rows = sql.join(jobs.map((j) => sql`(${j.id}, ${j.payload.n})`));
            await sql`INSERT INTO writes (item_id, n) VALUES ${rows}`.execute(trx);
            return Object.fromEntries(jobs.map((j) => [j.id, { outcome: 'complete' as const }]));
          }),
      })
    : defineHandler<{ n: number }>({
        handle: (job, ctx) =>
          ctx.transaction(async (trx) => {
            await sql`INSERT INTO writes (item_id, n) VALUES (${job.id}, ${job.payload.n})`.execute(trx);
          }),
      });
  const phase = batched ? 'batched' : 'single';
  setPhase(phase);
  const { seconds } = await drain(consumers(env, 1, { queue, concurrency: 32, handlers: { write } }), ITEMS, {
    pollMs: 50,
  });
  setPhase('idle');
  const sent = takePhase(phase);
  const written = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM writes`.execute(ledger.db);
  if (Number(written.rows[0]?.n) !== ITEMS) throw new Error(`${written.rows[0]?.n} rows written for ${ITEMS} items`);
  return {
    calls: NaN,
    jobsPerS: ITEMS / seconds,
    statementsPerItem: sent.statements / ITEMS,
    roundTripsPerItem: sent.roundTrips / ITEMS,
  };
}

export default defineWorkload<Variant, Result>({
  about: 'coalescing and batch handlers beside one call per item (Handler shapes)',
  variants: ['latest', 'plain', 'batched', 'single'],
  label: (v) => v,
  setup: installRoundTripCounter,
  measure: (v) =>
    withFreshLedger('lwshape', (env) =>
      v === 'latest' || v === 'plain' ? coalesce(env, v === 'latest') : writes(env, v === 'batched'),
    ),
  line: (_, r) =>
    `${Number.isNaN(r.calls) ? '' : `${fmt(r.calls)} handler calls, `}${fmt(r.jobsPerS)} items/s` +
    (Number.isNaN(r.statementsPerItem)
      ? ''
      : `, ${fmt(r.statementsPerItem, 2)} statements and ${fmt(r.roundTripsPerItem, 2)} round trips per item`),
  report: (of, runs) => {
    const m = (v: Variant, f: (r: Result) => number, digits = 0): string => fmt(median(of(v).map(f)), digits);
    return [
      {
        title:
          `Handler shapes: ${fmt(ITEMS)} updates over ${KEYS} keys, one consumer at concurrency 32, median of ` +
          `${runs} run(s), code ${codeRevision()}`,
        headers: ['workload', 'handler calls', 'items completed/s'],
        rows: [
          ['coalesce: latest', m('latest', (x) => x.calls), m('latest', (x) => x.jobsPerS)],
          ['one call per item', m('plain', (x) => x.calls), m('plain', (x) => x.jobsPerS)],
        ],
        align: ['left', 'right', 'right'],
      },
      {
        title:
          `Batch handlers: ${fmt(ITEMS)} laneless items, one row written per item in ctx.transaction, one ` +
          `consumer at concurrency 32, median of ${runs} run(s), code ${codeRevision()}`,
        headers: ['workload', 'items completed/s', 'statements per item', 'round trips per item'],
        rows: (['batched', 'single'] as const).map((v) => [
          v === 'batched' ? 'batch handler (max 32, maxWaitMs 20)' : 'one call per item',
          m(v, (x) => x.jobsPerS),
          m(v, (x) => x.statementsPerItem, 2),
          m(v, (x) => x.roundTripsPerItem, 2),
        ]),
        align: ['left', 'right', 'right', 'right'],
      },
    ];
  },
});
