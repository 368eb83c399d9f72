/**
 * Handler shapes (docs/BENCHMARKS.md, "Handler shapes"), each beside the
 * same workload run one item per handler call, alternating:
 * - coalescing: 20,000 updates over 100 keys (one lane per key), enqueued
 *   ahead, drained by one consumer at concurrency 32 whose handler
 *   coalesces with `latest`. Handler calls and items completed per second;
 *   each run checks that the last call of each key saw its newest update.
 * - batches: 20,000 laneless items enqueued ahead, drained by one consumer
 *   at concurrency 32 whose handler writes one row per item through
 *   ctx.transaction: a batch handler (max 32, maxWaitMs 20) inserts its
 *   batch's rows in one statement and completes them in the same
 *   transaction. Items per second, and the SQL statements and round trips
 *   the consumer sent per item (counted at the driver, bench/sql-count.ts).
 *
 *   npm run bench:shapes
 *   npm run bench:shapes -- --runs 1 --scale 0.2
 */
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { Consumer } from '../src/consumer/consumer.js';
import { defineBatchHandler } from '../src/consumer/batches.js';
import { defineHandler } from '../src/consumer/types.js';
import { createLogger } from '../src/log.js';
import { installRoundTripCounter, setPhase, takePhase } from './sql-count.js';
import { enqueueAhead, withFreshLedger } from './fresh-ledger.js';
import { cliFlag, codeRevision, fmt, median, printTable, progress, runBenchmark } from './support.js';

const RUNS = Number(cliFlag('--runs') ?? 3);
const SCALE = Number(cliFlag('--scale') ?? 1);
const ITEMS = Math.round(20_000 * SCALE);
const KEYS = 100;

interface Result {
  calls: number;
  jobsPerS: number;
}

function drain(coalesce: boolean): Promise<Result> {
  return withFreshLedger('lwshape', async (ledger, wake, producer) => {
    const queue = 'shapes';
    await enqueueAhead(
      producer,
      Array.from({ length: ITEMS }, (_, n) => ({
        queue,
        type: 'upd',
        lane: `key:${n % KEYS}`,
        payload: { key: n % KEYS, n },
      })),
    );
    let calls = 0;
    const newestSeen = new Map<number, number>();
    const handle = async (job: { payload: { key: number; n: number } }): Promise<void> => {
      calls++;
      newestSeen.set(job.payload.key, Math.max(newestSeen.get(job.payload.key) ?? -1, job.payload.n));
    };
    const consumer = new Consumer({
      ledger,
      wake,
      queue,
      concurrency: 32,
      logger: createLogger('bench', 'silent'),
      handlers: { upd: coalesce ? defineHandler<{ key: number; n: number }>({ coalesce: 'latest', handle }) : handle },
    });
    const started = performance.now();
    await consumer.start();
    let completed = 0;
    while (completed < ITEMS) {
      await new Promise((r) => setTimeout(r, 50));
      const r = await sql<{
        n: number | string;
      }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items} WHERE state = 'completed'`.execute(ledger.db);
      completed = Number(r.rows[0]?.n ?? 0);
    }
    const seconds = (performance.now() - started) / 1000;
    await consumer.stop({ drainTimeoutMs: 5000 });
    for (let key = 0; key < KEYS; key++) {
      const newest = ITEMS - KEYS + key;
      if (newestSeen.get(key) !== newest)
        throw new Error(`key ${key}: the last call saw update ${newestSeen.get(key)}, not the newest (${newest})`);
    }
    return { calls, jobsPerS: ITEMS / seconds };
  });
}

interface BatchResult {
  jobsPerS: number;
  statementsPerItem: number;
  roundTripsPerItem: number;
}

function drainWrites(batched: boolean): Promise<BatchResult> {
  return withFreshLedger('lwshape', async (ledger, wake, producer) => {
    await sql`CREATE TABLE writes (item_id VARCHAR(32) NOT NULL PRIMARY KEY, n INT NOT NULL)`.execute(ledger.db);
    const queue = 'batches';
    await enqueueAhead(
      producer,
      Array.from({ length: ITEMS }, (_, n) => ({ queue, type: 'write', payload: { n } })),
    );
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
    const consumer = new Consumer({
      ledger,
      wake,
      queue,
      concurrency: 32,
      logger: createLogger('bench', 'silent'),
      handlers: { write },
    });
    const phase = batched ? 'batched' : 'single';
    setPhase(phase);
    const started = performance.now();
    await consumer.start();
    let completed = 0;
    while (completed < ITEMS) {
      await new Promise((r) => setTimeout(r, 50));
      completed = consumer.counters.completed;
    }
    const seconds = (performance.now() - started) / 1000;
    await consumer.stop({ drainTimeoutMs: 5000 });
    setPhase('idle');
    const shapes = takePhase(phase);
    const written = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM writes`.execute(ledger.db);
    if (Number(written.rows[0]?.n) !== ITEMS) throw new Error(`${written.rows[0]?.n} rows written for ${ITEMS} items`);
    return {
      jobsPerS: ITEMS / seconds,
      statementsPerItem: shapes.reduce((sum, x) => sum + x.statements * x.count, 0) / ITEMS,
      roundTripsPerItem: shapes.reduce((sum, x) => sum + x.count, 0) / ITEMS,
    };
  });
}

runBenchmark(async () => {
  installRoundTripCounter();
  const runs: { latest: Result[]; plain: Result[] } = { latest: [], plain: [] };
  for (let r = 1; r <= RUNS; r++) {
    // Alternated, so drift on a shared machine falls on both alike.
    for (const variant of r % 2 === 1 ? (['latest', 'plain'] as const) : (['plain', 'latest'] as const)) {
      const result = await drain(variant === 'latest');
      runs[variant].push(result);
      progress(`run ${r} ${variant}: ${fmt(result.calls)} handler calls, ${fmt(result.jobsPerS)} items/s`);
    }
  }
  printTable(
    `Handler shapes: ${fmt(ITEMS)} updates over ${KEYS} keys, one consumer at ` +
      `concurrency 32, median of ${RUNS} run(s), code ${codeRevision()}`,
    ['workload', 'handler calls', 'items completed/s'],
    [
      [
        'coalesce: latest',
        fmt(median(runs.latest.map((x) => x.calls))),
        fmt(median(runs.latest.map((x) => x.jobsPerS))),
      ],
      [
        'one call per item',
        fmt(median(runs.plain.map((x) => x.calls))),
        fmt(median(runs.plain.map((x) => x.jobsPerS))),
      ],
    ],
    ['left', 'right', 'right'],
  );
  const writes: { batched: BatchResult[]; single: BatchResult[] } = { batched: [], single: [] };
  for (let r = 1; r <= RUNS; r++) {
    for (const variant of r % 2 === 1 ? (['batched', 'single'] as const) : (['single', 'batched'] as const)) {
      const result = await drainWrites(variant === 'batched');
      writes[variant].push(result);
      progress(
        `run ${r} ${variant}: ${fmt(result.jobsPerS)} items/s, ` +
          `${fmt(result.statementsPerItem, 2)} statements and ` +
          `${fmt(result.roundTripsPerItem, 2)} round trips per item`,
      );
    }
  }
  const row = (label: string, xs: BatchResult[]): string[] => [
    label,
    fmt(median(xs.map((x) => x.jobsPerS))),
    fmt(median(xs.map((x) => x.statementsPerItem)), 2),
    fmt(median(xs.map((x) => x.roundTripsPerItem)), 2),
  ];
  printTable(
    `Batch handlers: ${fmt(ITEMS)} laneless items, one row written per item in ` +
      `ctx.transaction, one consumer at concurrency 32, median of ${RUNS} run(s), code ` +
      `${codeRevision()}`,
    ['workload', 'items completed/s', 'statements per item', 'round trips per item'],
    [row('batch handler (max 32, maxWaitMs 20)', writes.batched), row('one call per item', writes.single)],
    ['left', 'right', 'right', 'right'],
  );
});
