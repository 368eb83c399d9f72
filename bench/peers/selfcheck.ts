/**
 * A tiny end-to-end check of one benchmark adapter (bench/peers/types.ts):
 *
 *   npx tsx bench/peers/selfcheck.ts bullmq:defaults
 *   npx tsx bench/peers/selfcheck.ts 'pg-boss:batch worker, poll 0.5 s'
 *
 * Fresh namespace → setup → connect → enqueueBatch 200 → worker (concurrency
 * 32) → all 200 arrive once each → completedCount reaches 200 → enqueueOne
 * 20 more, all arrive once → stop → close →
 * teardown → nothing of the namespace is left (for the systems that say how
 * to look) → a second teardown is harmless. Exits 1 on the first failure.
 *
 * Options: --batch N (200), --single N (20), --concurrency N (32), --deadline S (120).
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { bullmqFactories, bullmqLeftovers } from './bullmq.js';
import { pgBossFactories, pgBossLeftovers } from './pgboss.js';
import { monotonicUs } from './clock.js';
import type { BenchJob, Namespace, PeerFactory } from './types.js';

/** How to see what a system left behind in a namespace, for the systems that export it. */
const LEFTOVERS: Record<string, (ns: Namespace) => Promise<string[]>> = {
  bullmq: bullmqLeftovers,
  'pg-boss': pgBossLeftovers,
};

function label(f: PeerFactory): string {
  return `${f.system}:${f.mode}`;
}

async function findFactory(name: string): Promise<PeerFactory> {
  const own = [...bullmqFactories, ...pgBossFactories].find((f) => label(f) === name);
  if (own) return own;
  // Other adapters through the registry ("system:mode").
  const colon = name.indexOf(':');
  if (colon < 0) throw new Error(`factory name must be system:mode, e.g. bullmq:defaults (got '${name}')`);
  const { findFactory: find } = await import('./registry.js');
  return find(name.slice(0, colon), name.slice(colon + 1));
}

function intOption(args: string[], name: string, fallback: number): number {
  const i = args.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const v = Number(args[i + 1]);
  if (!Number.isInteger(v) || v <= 0) throw new Error(`--${name} needs a positive integer`);
  return v;
}

const t0 = performance.now();
function log(msg: string): void {
  process.stdout.write(`[${((performance.now() - t0) / 1000).toFixed(2).padStart(7)} s] ${msg}\n`);
}

async function waitFor(what: string, deadlineMs: number, cond: () => boolean | Promise<boolean>): Promise<number> {
  const start = performance.now();
  for (;;) {
    if (await cond()) return performance.now() - start;
    if (performance.now() - start > deadlineMs) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const name = args.find((a) => !a.startsWith('--') && !/^\d+$/.test(a));
  if (!name)
    throw new Error(
      'usage: tsx bench/peers/selfcheck.ts <system:mode> [--batch N] [--single N] [--concurrency N] [--deadline S]',
    );
  const batch = intOption(args, 'batch', 200);
  const single = intOption(args, 'single', 20);
  const concurrency = intOption(args, 'concurrency', 32);
  const deadlineMs = intOption(args, 'deadline', 120) * 1000;

  const factory = await findFactory(name);
  const ns: Namespace = { id: `sc${randomBytes(5).toString('hex')}` };
  log(
    `${label(factory)}: namespace ${ns.id}; ordersByKey=${factory.ordersByKey}; ` +
      `workloads=${factory.workloads.join(',')}`,
  );
  const failures: string[] = [];
  const check = (ok: boolean, msg: string) => {
    log(`${ok ? 'ok  ' : 'FAIL'} ${msg}`);
    if (!ok) failures.push(msg);
  };

  const adapter = factory.create(ns);
  const seen = new Map<number, number>();
  const arrivedAt = new Map<number, number>();
  let calls = 0;
  let badPayload = 0;
  let setUp = false;
  try {
    await adapter.setup();
    setUp = true;
    await adapter.connect();
    log('setup + connect done');

    const jobs: BenchJob[] = Array.from({ length: batch }, (_, n) => ({ n }));
    let t = performance.now();
    await adapter.enqueueBatch(jobs);
    log(`enqueueBatch(${batch}) in ${(performance.now() - t).toFixed(1)} ms`);

    t = performance.now();
    const worker = await adapter.startWorker({
      concurrency,
      onJob: (job) => {
        calls++;
        if (typeof job.n !== 'number') badPayload++;
        seen.set(job.n, (seen.get(job.n) ?? 0) + 1);
        if (!arrivedAt.has(job.n)) arrivedAt.set(job.n, performance.now());
      },
    });
    log(`startWorker(concurrency ${concurrency}) ready in ${(performance.now() - t).toFixed(1)} ms`);

    const batchMs = await waitFor(`${batch} distinct jobs`, deadlineMs, () => seen.size >= batch);
    log(
      `${batch} distinct jobs arrived ${batchMs.toFixed(0)} ms after the worker was ` +
        `ready (${((batch / batchMs) * 1000).toFixed(0)} jobs/s)`,
    );

    let last = -1;
    await waitFor(
      `completedCount() = ${batch}`,
      deadlineMs,
      async () => (last = await adapter.completedCount()) >= batch,
    ).catch(() => undefined);
    check(last === batch, `completedCount() = ${last} (expected ${batch})`);

    const latencies: number[] = [];
    for (let i = 0; i < single; i++) {
      const n = batch + i;
      const start = performance.now();
      await adapter.enqueueOne({ n, enqueuedAtUs: monotonicUs() });
      await waitFor(`job ${n}`, deadlineMs, () => seen.has(n));
      latencies.push((arrivedAt.get(n) ?? Number.NaN) - start);
    }
    latencies.sort((a, b) => a - b);
    log(
      `${single} enqueueOne jobs arrived one by one; enqueue call→onJob: min ${latencies[0]?.toFixed(1)} ms, ` +
        `median ${latencies[Math.floor(latencies.length / 2)]?.toFixed(1)} ms, max ` +
        `${latencies[latencies.length - 1]?.toFixed(1)} ms`,
    );

    t = performance.now();
    await worker.stop();
    log(`worker.stop() in ${(performance.now() - t).toFixed(1)} ms`);

    const total = batch + single;
    const missing = Array.from({ length: total }, (_, n) => n).filter((n) => !seen.has(n));
    const dups = [...seen.entries()].filter(([, c]) => c > 1);
    check(
      missing.length === 0,
      `every job arrived (${seen.size}/${total} ` +
        `distinct${missing.length ? `, missing e.g. ${missing.slice(0, 5).join(',')}` : ''})`,
    );
    check(
      dups.length === 0 && calls === total,
      `no duplicates (${calls} onJob calls for ${total} ` +
        `jobs${dups.length ? `; e.g. n=${dups[0]?.[0]} ×${dups[0]?.[1]}` : ''})`,
    );
    check(badPayload === 0, 'every payload carried its n');
    const after = await adapter.completedCount();
    check(after === total, `completedCount() after stop = ${after} (expected ${total})`);
  } catch (err) {
    failures.push(err instanceof Error ? err.message : String(err));
    log(`FAIL ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  } finally {
    await adapter.close().catch((err: unknown) => failures.push(`close: ${String(err)}`));
    log('closed');
    const probe = LEFTOVERS[factory.system];
    if (probe && setUp) {
      // Proves the leftover check below looks in the right place: before teardown it must find the namespace.
      const before = await probe(ns).catch(() => []);
      check(
        before.length > 0,
        `before teardown the namespace exists (${before.length} item(s), e.g. ${before[0] ?? '-'})`,
      );
    }
    await adapter.teardown().catch((err: unknown) => failures.push(`teardown: ${String(err)}`));
    log(`teardown done${setUp ? '' : ' (after a failed setup)'}`);
  }

  const leftovers = LEFTOVERS[factory.system];
  if (leftovers) {
    const left = await leftovers(ns);
    check(
      left.length === 0,
      `teardown left nothing (${left.length ? left.slice(0, 5).join(', ') : 'no keys / schema found'})`,
    );
  } else {
    log(`(no leftover check known for ${factory.system})`);
  }
  try {
    await adapter.teardown();
    check(true, 'a second teardown() is harmless');
  } catch (err) {
    check(false, `a second teardown() threw: ${String(err)}`);
  }

  if (failures.length > 0) {
    log(`SELF-CHECK FAILED for ${label(factory)}: ${failures.length} problem(s)`);
    process.exit(1);
  }
  log(`SELF-CHECK PASSED for ${label(factory)}`);
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
