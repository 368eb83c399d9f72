/**
 * Self-check for the graphile-worker benchmark adapters (bench/peers/graphile.ts).
 *
 *   npx tsx bench/peers/graphile-selfcheck.ts
 *
 * For each factory: fresh namespace, setup, connect, 200 jobs by enqueueBatch
 * into a concurrency-32 worker (all seen once, none twice), 20 by enqueueOne
 * (enqueue → handler-start latency printed), then 300 keyed jobs over 10 keys
 * in three batches with the per-key order of onJob calls checked, while a
 * sampler watches the jobs table for two locked jobs of one named queue. Then
 * a worker in a child process (connect + startWorker + stop + close) must
 * drain jobs and exit on its own, i.e. with no pool left open. Finally stop,
 * close, teardown, and the schema must be gone. Exits 1 on any failure.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { monotonicUs, msSince } from './clock.js';
import { graphileConnectionString, graphileFactories } from './graphile.js';
import type { BenchJob, PeerFactory } from './types.js';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, cond: () => boolean, timeoutMs: number): Promise<number> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(2);
  }
  return performance.now() - t0;
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

class Failures {
  readonly list: string[] = [];
  check(ok: boolean, what: string): void {
    console.log(`  ${ok ? 'ok  ' : 'FAIL'} ${what}`);
    if (!ok) this.list.push(what);
  }
}

/** Records onJob calls: distinct n, duplicates, per-key order. */
class Recorder {
  readonly seen = new Set<number>();
  duplicates = 0;
  orderViolations = 0;
  readonly lastSeq = new Map<string, number>();
  readonly latencies: number[] = [];
  readonly onJob = (job: BenchJob): void => {
    if (job.enqueuedAtUs !== undefined) this.latencies.push(msSince(job.enqueuedAtUs));
    if (this.seen.has(job.n)) this.duplicates++;
    else this.seen.add(job.n);
    if (job.key !== undefined && job.seq !== undefined) {
      const last = this.lastSeq.get(job.key);
      if (job.seq !== (last ?? -1) + 1) this.orderViolations++;
      this.lastSeq.set(job.key, Math.max(job.seq, last ?? -1));
    }
  };
  count(from: number, to: number): number {
    let c = 0;
    for (let n = from; n < to; n++) if (this.seen.has(n)) c++;
    return c;
  }
}

/** Polls for two jobs of one named queue locked at the same time (= running or held concurrently). */
function startOverlapSampler(schema: string): { stop: () => Promise<{ max: number; samples: number }> } {
  const client = new pg.Client({ connectionString: graphileConnectionString() });
  let running = true;
  let max = 0;
  let samples = 0;
  const loop = (async () => {
    await client.connect();
    while (running) {
      const r = await client.query<{ m: number }>(
        `select coalesce(max(c), 0)::int as m from (
           select count(*) as c from "${schema}"._private_jobs
           where locked_at is not null and job_queue_id is not null group by job_queue_id) t`,
      );
      max = Math.max(max, r.rows[0]?.m ?? 0);
      samples++;
      await sleep(1);
    }
    await client.end();
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return { max, samples };
    },
  };
}

async function schemaExists(schema: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: graphileConnectionString() });
  await c.connect();
  try {
    const r = await c.query('select 1 from pg_namespace where nspname = $1', [schema]);
    return (r.rowCount ?? 0) > 0;
  } finally {
    await c.end();
  }
}

/** Runs a worker in a child process; resolves with its exit code and how long it lingered after printing "closed". */
function runChild(
  factoryIndex: number,
  nsId: string,
  expect: number,
): Promise<{ code: number | null; lingerMs: number; out: string }> {
  return new Promise((resolve, reject) => {
    const self = fileURLToPath(import.meta.url);
    const child = spawn(
      process.execPath,
      [...process.execArgv, self, '--child', String(factoryIndex), nsId, String(expect)],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    let closedAt: number | undefined;
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (closedAt === undefined && out.includes('closed')) closedAt = performance.now();
    });
    const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(killer);
      resolve({ code, lingerMs: closedAt === undefined ? Number.NaN : performance.now() - closedAt, out });
    });
  });
}

async function childMain(factoryIndex: number, nsId: string, expect: number): Promise<void> {
  const factory = graphileFactories[factoryIndex];
  if (!factory) throw new Error(`no factory ${factoryIndex}`);
  const a = factory.create({ id: nsId });
  await a.connect();
  const seen = new Set<number>();
  const w = await a.startWorker({ concurrency: 8, onJob: (j) => void seen.add(j.n) });
  process.stdout.write('ready\n');
  await waitFor(`${expect} jobs in child`, () => seen.size >= expect, 20_000);
  await w.stop();
  await a.close();
  process.stdout.write(`processed ${seen.size}; closed\n`);
  // No process.exit(): the parent checks that nothing keeps the event loop alive.
}

async function checkFactory(factory: PeerFactory, index: number, f: Failures): Promise<void> {
  const id = `sc${randomBytes(4).toString('hex')}`;
  const schema = `gw_${id}`;
  console.log(`\n== ${factory.system} / ${factory.mode}  (schema ${schema}, ordersByKey ${factory.ordersByKey})`);
  const a = factory.create({ id });
  let worker: { stop(): Promise<void> } | undefined;
  try {
    let t = performance.now();
    await a.setup();
    await a.connect();
    console.log(`  setup+connect ${(performance.now() - t).toFixed(0)} ms`);

    const rec = new Recorder();
    t = performance.now();
    await a.enqueueBatch(Array.from({ length: 200 }, (_, n) => ({ n })));
    const enqMs = performance.now() - t;
    t = performance.now();
    worker = await a.startWorker({ concurrency: 32, onJob: rec.onJob });
    console.log(
      `  enqueueBatch(200) ${enqMs.toFixed(1)} ms; startWorker ready in ${(performance.now() - t).toFixed(0)} ms`,
    );
    const ms200 = await waitFor('200 batch jobs', () => rec.count(0, 200) === 200, 15_000);
    console.log(`  200 jobs processed ${ms200.toFixed(0)} ms after ready`);
    f.check(
      rec.count(0, 200) === 200 && rec.duplicates === 0,
      `batch: 200 distinct onJob calls, ${rec.duplicates} duplicates`,
    );

    // enqueueOne x20 into an idle worker, 20 ms apart: wake-up latency.
    await sleep(100);
    for (let n = 200; n < 220; n++) {
      await a.enqueueOne({ n, enqueuedAtUs: monotonicUs() });
      await sleep(20);
    }
    await waitFor('20 single jobs', () => rec.count(200, 220) === 20, 15_000);
    const lat = [...rec.latencies].sort((x, y) => x - y);
    f.check(
      rec.count(200, 220) === 20 && rec.duplicates === 0,
      `enqueueOne: 20 distinct onJob calls, ${rec.duplicates} duplicates`,
    );
    console.log(
      `  enqueue→onJob latency over ${lat.length}: p50 ${quantile(lat, 0.5).toFixed(2)} ms, p90 ${quantile(lat, 0.9).toFixed(2)} ms, max ${(lat[lat.length - 1] ?? Number.NaN).toFixed(2)} ms`,
    );

    // Ordered: 300 jobs over 10 keys, seq per key, three batches of 100.
    const sampler = startOverlapSampler(schema);
    await sleep(20);
    const jobs: BenchJob[] = [];
    const seqs = new Map<string, number>();
    for (let n = 300; n < 600; n++) {
      const key = `key${n % 10}`;
      const seq = seqs.get(key) ?? 0;
      seqs.set(key, seq + 1);
      jobs.push({ n, key, seq });
    }
    for (let b = 0; b < 3; b++) await a.enqueueBatch(jobs.slice(b * 100, b * 100 + 100));
    const orderedMs = await waitFor('300 ordered jobs', () => rec.count(300, 600) === 300, 30_000);
    const overlap = await sampler.stop();
    const allKeysDone = [...rec.lastSeq.values()].every((s) => s === 29);
    console.log(
      `  300 keyed jobs processed in ${orderedMs.toFixed(0)} ms; per-key order violations ${rec.orderViolations}; ` +
        `max locked jobs in one named queue ${overlap.max} (${overlap.samples} samples)`,
    );
    f.check(
      rec.count(300, 600) === 300 && rec.duplicates === 0 && allKeysDone,
      `ordered: 300 distinct onJob calls, ${rec.duplicates} duplicates, every key reached seq 29`,
    );
    if (factory.ordersByKey) {
      f.check(rec.orderViolations === 0, `ordered: 0 per-key order violations (got ${rec.orderViolations})`);
      f.check(overlap.max <= 1, `ordered: never two locked jobs in one named queue (max seen ${overlap.max})`);
    } else {
      console.log(
        `  (ordersByKey false: expected; informational) order violations ${rec.orderViolations}, max concurrently locked per queue ${overlap.max}`,
      );
    }

    t = performance.now();
    await worker.stop();
    worker = undefined;
    console.log(`  stop ${(performance.now() - t).toFixed(0)} ms`);
    const completed = await a.completedCount();
    f.check(completed === 520, `completedCount() = ${completed} (rows inserted less rows left; expected 520)`);

    // A worker in a child process: connect + startWorker against the
    // existing schema, drains 100 jobs, stops, closes, and must exit by itself.
    await a.enqueueBatch(Array.from({ length: 100 }, (_, i) => ({ n: 1000 + i })));
    t = performance.now();
    const child = await runChild(index, id, 100);
    f.check(
      child.code === 0 && child.out.includes('processed 100; closed'),
      `child worker drained 100 jobs and exited (code ${child.code}, ${(performance.now() - t).toFixed(0)} ms, exit ${child.lingerMs.toFixed(0)} ms after close)`,
    );
    f.check(child.lingerMs < 2_000, 'child exited promptly after close() (no open pool / timer)');

    await a.close();
  } finally {
    if (worker) await worker.stop().catch((e: unknown) => console.error('stop failed', e));
    await a.close().catch((e: unknown) => console.error('close failed', e));
    await a.teardown();
  }
  f.check(!(await schemaExists(schema)), `teardown: schema ${schema} is gone`);
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv[0] === '--child') {
    await childMain(Number(argv[1]), argv[2] ?? '', Number(argv[3]));
    return;
  }
  const f = new Failures();
  for (const [i, factory] of graphileFactories.entries()) {
    try {
      await checkFactory(factory, i, f);
    } catch (e) {
      f.check(false, `${factory.mode}: threw ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
    }
  }
  // Everything is closed: only stdio handles should remain.
  await sleep(50);
  const open = process.getActiveResourcesInfo().filter((r) => r !== 'TTYWrap' && r !== 'PipeWrap');
  f.check(open.length === 0, `parent: no open handles after close/teardown (${open.join(', ') || 'none'})`);
  console.log(
    f.list.length === 0 ? '\nSELF-CHECK PASSED' : `\nSELF-CHECK FAILED (${f.list.length}):\n- ${f.list.join('\n- ')}`,
  );
  if (f.list.length > 0) process.exitCode = 1;
}

await main();
