/**
 * What a workload of bench/run.ts is, and the parts workloads share: a fresh ledger per measurement, consumers
 * started and drained, the CPU an item cost. A workload is data: its variants, one measurement of a variant, the
 * line each measurement prints and the table(s) its medians make; bench/run.ts does the runs, the alternation,
 * the printing and the JSON record.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import { Consumer, type ConsumerOptions } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import {
  type Align,
  benchServerUrl,
  cliFlag,
  codeRevision,
  createBenchDatabase,
  printTable,
  progress,
  serverCpuSecondsOf,
  sleep,
} from './support.js';

import { REDIS_URL } from './peers/types.js';

export { REDIS_URL };
export const silent = createLogger('bench', 'silent');

/** A number flag of the command line (`--runs 3`), or its default. */
export const numFlag = (name: string, fallback: number): number => Number(cliFlag(name) ?? fallback);
/** `--scale F` times a full-size count. */
export const scaled = (n: number): number => Math.round(n * numFlag('--scale', 1));

export interface Table {
  title: string;
  headers: readonly string[];
  rows: readonly (readonly string[])[];
  align?: readonly Align[];
}

export interface Workload<V, R> {
  /** One line: what it measures (docs/BENCHMARKS.md says where its rows are). */
  about: string;
  /** Measured in this order in odd runs and reversed in even ones, so a shared machine's drift falls on all. */
  variants: readonly V[];
  label: (v: V) => string;
  /** Runs when `--runs` is not given. */
  runs?: number;
  /** Once, before the first measurement. */
  setup?: () => void | Promise<void>;
  measure: (v: V) => Promise<R>;
  /** The progress line of one measurement (stderr). */
  line: (v: V, r: R) => string;
  /** The tables of every variant's results; `of(v)` holds one result per run. */
  report: (of: (v: V) => R[], runs: number) => Table[];
  /** Always write bench/results/<name>-latest.json, not only with `--save`. */
  save?: boolean;
  /** The results file's name instead of the workload's, once setup ran. */
  resultName?: () => string;
}

/** A workload with its types closed over: what bench/run.ts holds. */
export interface Runnable {
  about: string;
  run: (name: string) => Promise<void>;
}

export const defineWorkload = <V, R>(w: Workload<V, R>): Runnable => ({
  about: w.about,
  run: (name) => runWorkload(name, w),
});

async function runWorkload<V, R>(name: string, w: Workload<V, R>): Promise<void> {
  const runs = numFlag('--runs', w.runs ?? 3);
  await w.setup?.();
  const results = new Map<V, R[]>(w.variants.map((v) => [v, []]));
  for (let r = 1; r <= runs; r++) {
    for (const v of r % 2 === 1 ? w.variants : [...w.variants].reverse()) {
      const result = await w.measure(v);
      results.get(v)!.push(result);
      progress(`run ${r} ${w.label(v)}: ${w.line(v, result)}`);
    }
  }
  const tables = w.report((v) => results.get(v)!, runs);
  for (const t of tables) printTable(t.title, t.headers, t.rows, t.align);
  const record = {
    workload: name,
    code: codeRevision(),
    at: new Date().toISOString(),
    args: process.argv.slice(3),
    node: process.version,
    runs: w.variants.map((v) => ({ variant: w.label(v), results: results.get(v) })),
    tables,
  };
  if (w.save === true || process.argv.includes('--save')) {
    const dir = fileURLToPath(new URL('./results/', import.meta.url));
    mkdirSync(dir, { recursive: true });
    writeFileSync(`${dir}${w.resultName?.() ?? name}-latest.json`, `${JSON.stringify(record, null, 2)}\n`);
  }
  if (process.argv.includes('--json')) console.log(JSON.stringify(record));
}

/** LANEWAKE_BENCH_TIDB_TXN_MODE: the TiDB transaction mode of a bench's ledgers. */
const tidbTxnMode = (): { tidbTxnMode?: 'optimistic' | 'pessimistic' } => {
  const mode = process.env.LANEWAKE_BENCH_TIDB_TXN_MODE;
  return mode === 'optimistic' || mode === 'pessimistic' ? { tidbTxnMode: mode } : {};
};

export interface Fresh {
  ledger: Ledger;
  wake: WakeChannel;
  producer: Producer;
}

/** A migrated ledger on a database of its own and a wake channel on keys of its own, for one run; dropped after. */
export async function withFreshLedger<T>(prefix: string, run: (env: Fresh) => Promise<T>, poolSize = 10): Promise<T> {
  const db = await createBenchDatabase(prefix);
  const ledger = new Ledger({ url: db.url, poolSize, ...tidbTxnMode() });
  const wake = new WakeChannel({ redis: REDIS_URL, keyPrefix: `${prefix}:${db.name}:`, logger: silent });
  try {
    await ledger.migrate();
    return await run({ ledger, wake, producer: new Producer({ ledger, wake }) });
  } finally {
    await wake.dropKeys().catch(() => undefined);
    await wake.close();
    await ledger.close();
    await db.drop();
  }
}

type Item = Parameters<Producer['enqueueMany']>[0][number];

/** Enqueues `items` ahead of a drain, 1,000 at a time. */
export async function enqueueAhead(producer: Producer, items: readonly Item[]): Promise<void> {
  for (let i = 0; i < items.length; i += 1000) await producer.enqueueMany(items.slice(i, i + 1000));
}

/** `count` items made by `item(n)`, enqueued ahead. */
export const enqueueMade = (producer: Producer, count: number, item: (n: number) => Item): Promise<void> =>
  enqueueAhead(
    producer,
    Array.from({ length: count }, (_, n) => item(n)),
  );

/** `n` consumers of the fresh ledger's queue, silent. */
export function consumers(
  env: Fresh,
  n: number,
  options: Omit<ConsumerOptions, 'ledger' | 'wake' | 'logger'>,
): Consumer[] {
  return Array.from(
    { length: n },
    () => new Consumer({ ledger: env.ledger, wake: env.wake, logger: silent, ...options }),
  );
}

export interface Drained {
  seconds: number;
  /** This process's CPU per item, µs. */
  nodeUs: number;
  /** The SQL server's CPU per item, µs, when it runs on this machine. */
  serverUs: number | undefined;
}

/**
 * Starts `cs` and waits until `done()` (by default their completed count) reaches `total`; `during` runs once they
 * started. Stops them after; times and CPU are from the start to the last completion.
 */
export async function drain(
  cs: readonly Consumer[],
  total: number,
  opts: { done?: () => number | Promise<number>; during?: () => Promise<void>; pollMs?: number } = {},
): Promise<Drained> {
  const done = opts.done ?? ((): number => cs.reduce((sum, c) => sum + c.counters.completed, 0));
  const serverBefore = serverCpuSecondsOf(benchServerUrl());
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  await Promise.all(cs.map((c) => c.start()));
  await opts.during?.();
  while ((await done()) < total) await sleep(opts.pollMs ?? 20);
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const serverAfter = serverCpuSecondsOf(benchServerUrl());
  await Promise.all(cs.map((c) => c.stop({ drainTimeoutMs: 5000 })));
  return {
    seconds,
    nodeUs: (cpu.user + cpu.system) / total,
    serverUs:
      serverBefore === undefined || serverAfter === undefined
        ? undefined
        : ((serverAfter - serverBefore) * 1e6) / total,
  };
}

/** Polls `check` every 2 ms until it holds; throws after `timeoutMs`. */
export async function waitUntil(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

/** A ledger of one queue on a database of its own, with or without a wake channel; `close` drops both. */
export interface Env {
  url: string;
  keyPrefix: string;
  ledger: Ledger;
  wake: WakeChannel | undefined;
  queue: string;
  close: () => Promise<void>;
}

/** `serverUrl`: the MySQL-protocol server (no database) to run on; bench/latency.ts points it at a proxy. */
export async function environment(withRedis: boolean, serverUrl = benchServerUrl()): Promise<Env> {
  const db = await createBenchDatabase('lwe', serverUrl);
  const ledger = new Ledger({ url: db.url, poolSize: 12, ...tidbTxnMode() });
  await ledger.migrate();
  const keyPrefix = `lwbench:${randomBytes(4).toString('hex')}:`;
  const wake = withRedis ? new WakeChannel({ redis: REDIS_URL, keyPrefix, logger: silent }) : undefined;
  const close = async (): Promise<void> => {
    await wake?.timers.close();
    await wake?.dropKeys();
    await wake?.close();
    await ledger.close();
    await db.drop();
  };
  return { url: db.url, keyPrefix, ledger, wake, queue: 'bench', close };
}

/** The queue's completed items, counted whole (Ledger.stats caps terminal counts at 10,000). */
export async function completedInLedger(env: Pick<Env, 'ledger' | 'queue'>): Promise<number> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${env.ledger.tables.items}
    WHERE queue = ${env.queue} AND state = 'completed'`.execute(env.ledger.db);
  return Number(r.rows[0]?.n ?? 0);
}

/** Throws unless each of `expected` jobs ran once (`seen`: runs by id) and the ledger counts them completed. */
export async function verifyOnce(env: Env, seen: Map<string, number>, expected: number): Promise<void> {
  const repeats = [...seen.values()].filter((n) => n !== 1).length;
  const completed = await completedInLedger(env);
  if (seen.size !== expected || repeats > 0 || completed !== expected) {
    throw new Error(
      `verification failed: ${seen.size} distinct jobs ran (want ${expected}), ` +
        `${repeats} ran more than once, ${completed} completed in the ledger`,
    );
  }
}

/** A consumer of `env`'s queue whose no-op handler counts each run in `seen`. */
export function noopConsumer(env: Env, concurrency: number, seen: Map<string, number>): Consumer {
  return new Consumer({
    ...{ ledger: env.ledger, wake: env.wake, queue: env.queue, concurrency, logger: silent },
    handlers: { noop: async (job: { id: string }) => void seen.set(job.id, (seen.get(job.id) ?? 0) + 1) },
  });
}
