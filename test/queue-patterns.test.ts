// Queues by pattern (docs/design.md, "Supervisor and operations", reconciler): a worker given `tenant-*` serves
// every queue of the ledger it matches, found within one reconcile interval of its first item, without a restart;
// a deleted queue is let go; /readyz says what is served and why.
import { Socket } from 'node:net';
import { sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import { forgetQueueSeries } from '../src/supervisor/metric-series.js';
import { LanewakeMetrics } from '../src/supervisor/metrics.js';
import { patternMatcher } from '../src/supervisor/queue-patterns.js';
import type { HandlersByQueue } from '../src/supervisor/handlers-module.js';
import { Supervisor } from '../src/supervisor/supervisor.js';
import { lanewake } from './support/cli.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, waitForCount, type TestLedger } from './support/ledger.js';
import { redisUrl } from './support/services.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

/** How many queues the fleet test creates while its workers run: 1,000 is a bench row (docs/BENCHMARKS.md). */
const QUEUES = Number(process.env.LANEWAKE_TEST_PATTERN_QUEUES ?? 100);
const WORKERS = 4;
const RECONCILE_MS = 1_000;

async function fixtures(): Promise<{ tl: TestLedger; tw: TestWake }> {
  const tl = await createTestLedger();
  const tw = createTestWake();
  cleanups.push(
    () => tl.drop(),
    () => tw.drop(),
  );
  return { tl, tw };
}

function worker(
  tl: TestLedger,
  tw: TestWake,
  queues: string,
  handlers: Record<string, Record<string, (job: { id: string }) => Promise<unknown>>>,
  metrics?: LanewakeMetrics,
): Supervisor {
  const config = resolveWorkerConfig([
    {
      databaseUrl: tl.url,
      redisUrl: redisUrl(),
      redisKeyPrefix: tw.keyPrefix,
      handlers: 'inline',
      admin: false,
      reconcileIntervalMs: RECONCILE_MS,
      drainTimeoutMs: 2_000,
      poolSize: 4,
      queues: queues.split(',').map((entry) => {
        const [name, concurrency] = entry.split(':');
        return { name, ...(concurrency !== undefined ? { concurrency: Number(concurrency) } : {}) };
      }),
    },
  ]);
  const sup = new Supervisor({
    config,
    handlers: handlers as HandlersByQueue,
    logger: createLogger('test', 'silent'),
    ...(metrics
      ? {
          onConsumer: (consumer) => metrics.observeConsumer(consumer),
          onQueueGone: (queue) => forgetQueueSeries(metrics.registry, queue),
        }
      : {}),
  });
  cleanups.push(() => sup.stop());
  return sup;
}

/** This process's open connections to Redis's port. */
function redisSockets(): number {
  const port = Number(new URL(redisUrl()).port || 6379);
  const handles = (process as unknown as { _getActiveHandles: () => unknown[] })._getActiveHandles();
  return handles.filter((h) => h instanceof Socket && h.remotePort === port && !h.destroyed).length;
}

describe('queue patterns', () => {
  test('a pattern matches whole names, * any run of characters', () => {
    const m = patternMatcher('tenant-*.jobs');
    expect(['tenant-a.jobs', 'tenant-.jobs', 'tenant-a-b.jobs'].every(m)).toBe(true);
    expect(['tenant-a.jobsx', 'xtenant-a.jobs', 'tenant-ajobs'].some(m)).toBe(false);
    expect(() =>
      resolveWorkerConfig([{ databaseUrl: 'x', handlers: 'x', queues: [{ name: 't-*', ownership: true }] }]),
    ).toThrow(/ownership epochs are for a queue named in full/);
  });

  test(`${QUEUES} queues created while ${WORKERS} workers run: each served within one reconcile interval`, async () => {
    const { tl, tw } = await fixtures();
    const prefix = uniqueQueue('tn');
    const startedAt = new Map<string, number>();
    const handlers = {
      [`${prefix}-*`]: { job: async (job: { id: string }) => void startedAt.set(job.id, Date.now()) },
    };
    const workers = Array.from({ length: WORKERS }, () => worker(tl, tw, `${prefix}-*:2`, handlers));
    for (const w of workers) await w.start();
    for (const w of workers) expect(w.served()).toEqual([]);
    const before = redisSockets();
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    const enqueuedAt = new Map<string, { queue: string; at: number }>();
    // When every worker first served each queue: watched every 20 ms.
    const servedAt = new Map<string, number>();
    const watch = setInterval(() => {
      for (const { queue } of enqueuedAt.values())
        if (!servedAt.has(queue) && workers.every((w) => w.runners.has(queue))) servedAt.set(queue, Date.now());
    }, 20);
    cleanups.push(async () => clearInterval(watch));
    for (let i = 0; i < QUEUES; i++) {
      const queue = `${prefix}-${i}`;
      const { id } = await producer.enqueue({ queue, type: 'job', payload: {} });
      enqueuedAt.set(id, { queue, at: Date.now() });
    }
    await waitForCount(async () => startedAt.size, QUEUES, 20_000, 'an item of every queue started');
    // One worker's consumer may have run a queue's item before every worker served it.
    await waitForCount(async () => servedAt.size, QUEUES, 20_000, 'every queue served by every worker');
    clearInterval(watch);
    const served = [...enqueuedAt.values()].map((e) => (servedAt.get(e.queue) ?? Number.POSITIVE_INFINITY) - e.at);
    const started = [...enqueuedAt].map(([id, e]) => (startedAt.get(id) ?? Number.POSITIVE_INFINITY) - e.at);
    const tail = (xs: number[]) => {
      const sorted = [...xs].sort((a, b) => a - b);
      return { p50: sorted[sorted.length >> 1], p99: sorted[Math.floor(sorted.length * 0.99)], max: sorted.at(-1) };
    };
    if (process.env.LANEWAKE_TEST_PATTERN_FIGURES)
      console.info({ queues: QUEUES, served: tail(served), started: tail(started) });
    // Every worker serves the queue by its next pass: one interval, plus the read and, with four workers starting
    // consumers in one process on a shared 2-core machine, the event loop's delay.
    expect(tail(served).max).toBeLessThan(RECONCILE_MS + 2_000);
    // Then its consumers start and claim: every queue's item started (waitForCount above). How soon is the
    // server's speed, not asserted (docs/BENCHMARKS.md has the figures: 400 consumers starting at once on TiDB).
    for (const w of workers) expect(w.served()).toHaveLength(QUEUES);
    const after = redisSockets();
    // The wake hub reads 64 streams per connection (3 per queue) and all control streams on one, and the timers
    // start with the first consumer: not a connection or two per queue, but not yet O(1) either (issue 54).
    expect(after - before).toBeLessThanOrEqual(WORKERS * (Math.ceil((3 * QUEUES) / 64) + 4));
    if (process.env.LANEWAKE_TEST_PATTERN_FIGURES) console.info({ redisSockets: { before, after } });
  }, 120_000);

  test('a queue defined with `lanewake queue create` is served before its first item', async () => {
    const { tl, tw } = await fixtures();
    const prefix = uniqueQueue('cr');
    const sup = worker(tl, tw, `${prefix}-*`, { [`${prefix}-*`]: { job: async () => undefined } });
    await sup.start();
    const queue = `${prefix}-new`;
    const created = await lanewake(['--database-url', tl.url, 'queue', 'create', queue, '--json']);
    expect(created.code, created.err).toBe(0);
    expect(JSON.parse(created.out)).toEqual({ queue, created: true });
    expect((await lanewake(['--database-url', tl.url, 'queue', 'create', queue])).out).toContain('already defined');
    // Within one interval: the next read of the ledger's queues, and the consumer's start.
    await waitFor(
      () => sup.runners.get(queue)?.every((r) => r.state === 'running') || undefined,
      RECONCILE_MS + 2_000,
      'the defined queue served',
    );
    expect(await tl.ledger.operator.hasSeenQueue(queue)).toBe(true);
  });

  test('a deleted queue is let go at the next pass; /readyz says pinned, matched and drain-only, or none', async () => {
    const { tl, tw } = await fixtures();
    const prefix = uniqueQueue('rz');
    const pinned = `${prefix}-pinned`;
    const ran: string[] = [];
    const job = async (j: { id: string }) => void ran.push(j.id);
    const metrics = new LanewakeMetrics();
    const sup = worker(tl, tw, `${prefix}-*:2,${pinned}:1`, { [`${prefix}-*`]: { job }, [pinned]: { job } }, metrics);
    await sup.start();
    const empty = await sup.readiness();
    expect(empty.checks.queues).toEqual({ ok: true, detail: 'serving 1 queue(s)' });
    const lone = worker(tl, tw, `${prefix}-none-*`, { [`${prefix}-none-*`]: { job } });
    await lone.start();
    // Serving no queue, it says so and is not ready: nothing a rollout waits on is served by it.
    const none = await lone.readiness();
    expect(none.checks.queues).toEqual({
      ok: false,
      detail: `serving no queue: none in the ledger matches ${prefix}-none-*`,
    });
    expect(none.ready).toBe(false);
    expect(none.queues).toEqual([]);

    const queue = `${prefix}-a`;
    const kept = `${prefix}-b`;
    const first = await tl.ledger.enqueue({ queue, type: 'job', payload: {} });
    const other = await tl.ledger.enqueue({ queue: kept, type: 'job', payload: {} });
    await waitFor(() => [first.id, other.id].every((id) => ran.includes(id)) || undefined, 10_000, 'both served');
    await tl.ledger.setDrainOnly(queue, true);
    await tl.ledger.setDrainOnly(pinned, true);
    await waitFor(
      async () => (await sup.readiness()).queues?.filter((q) => q.drainOnly).length === 2 || undefined,
      10_000,
      'drain-only seen',
    );
    const rows = new Map((await tl.ledger.queueRows()).map((r) => [r.queue, r.incarnation]));
    const slots = (value: number, from: string) => ({
      slots: { value, from },
      maxProcessing: { value: null, from: 'default' },
      concurrencyLimit: { value: null, from: 'default' },
    });
    expect((await sup.readiness()).queues).toEqual([
      { queue: pinned, why: 'pinned', drainOnly: true, incarnation: rows.get(pinned), settings: slots(1, 'config') },
      {
        queue,
        why: 'matched',
        pattern: `${prefix}-*`,
        drainOnly: true,
        incarnation: rows.get(queue),
        settings: slots(2, 'config'),
      },
      {
        queue: kept,
        why: 'matched',
        pattern: `${prefix}-*`,
        drainOnly: false,
        incarnation: rows.get(kept),
        settings: slots(2, 'config'),
      },
    ]);
    expect(await metrics.registry.metrics()).toContain(`queue="${queue}"`);
    // The delete waits for producers to learn the flag; here the clock is moved instead of waited out.
    await sql`UPDATE ${sql.table(`${tl.ledger.tables.prefix}queues`)}
      SET drain_since = NOW(6) - INTERVAL 1 MINUTE WHERE queue = ${queue}`.execute(tl.ledger.db);
    await tl.ledger.deleteQueue(queue);
    await waitFor(() => !sup.runners.has(queue) || undefined, 10_000, 'the deleted queue let go');
    expect(sup.served().map((q) => q.queue)).toEqual([pinned, kept]);
    // Its series go once its consumers have stopped; the queue still served keeps its own.
    const text = await waitFor(
      async () => {
        const t = await metrics.registry.metrics();
        return !t.includes(`queue="${queue}"`) && t;
      },
      10_000,
      "the deleted queue's series gone",
    );
    expect(text).toContain(`queue="${kept}"`);
  }, 60_000);
});
