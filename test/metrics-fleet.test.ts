import { afterEach, expect, test } from 'vitest';
import { PermanentError } from '../src/consumer/errors.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import type { WorkerConfig } from '../src/supervisor/config.js';
import type { HandlersByQueue } from '../src/supervisor/handlers-module.js';
import { LanewakeMetrics } from '../src/supervisor/metrics.js';
import { startWorker, type RunningWorker } from '../src/supervisor/run-worker.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { needPromtool, promtool } from './support/promtool.js';
import { redisUrl } from './support/services.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function fixtures(): Promise<{ tl: TestLedger; tw: TestWake; queue: string }> {
  const tl = await createTestLedger();
  const tw = createTestWake();
  cleanups.push(
    () => tl.drop(),
    () => tw.drop(),
  );
  return { tl, tw, queue: uniqueQueue('mf') };
}

function config(tl: TestLedger, tw: TestWake, queue: string): WorkerConfig {
  return resolveWorkerConfig([
    {
      databaseUrl: tl.url,
      redisUrl: redisUrl(),
      redisKeyPrefix: tw.keyPrefix,
      handlers: 'inline',
      admin: { host: '127.0.0.1', port: 0 },
      reconcileIntervalMs: 200,
      drainTimeoutMs: 5_000,
      queues: [{ name: queue, concurrency: 4 }],
    },
  ]);
}

function handlersFor(queue: string): HandlersByQueue {
  return {
    [queue]: {
      ok: async () => 'done',
      slow: () => new Promise((resolve) => setTimeout(() => resolve('slow'), 50)),
      refuse: async () => {
        throw new PermanentError('never valid');
      },
      boom: async () => {
        throw new Error('boom');
      },
    },
  };
}

async function start(tl: TestLedger, tw: TestWake, queue: string): Promise<RunningWorker> {
  const w = await startWorker(config(tl, tw, queue), {
    handlers: handlersFor(queue),
    logger: createLogger('test', 'silent'),
  });
  cleanups.push(() => w.stop());
  return w;
}

async function scrape(w: RunningWorker): Promise<string> {
  const res = await fetch(`${w.admin?.url ?? 'http://missing'}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

/** The sample lines of one metric name (any labels). */
function series(text: string, name: string): string[] {
  return text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
}

async function feed(tl: TestLedger, tw: TestWake, queue: string): Promise<void> {
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  await producer.enqueueMany([
    { queue, type: 'ok', payload: { n: 1 } },
    { queue, type: 'ok', payload: { n: 2 }, lane: 'L' },
    { queue, type: 'slow', payload: {}, lane: 'L' },
    { queue, type: 'ok', payload: {}, delayMs: 200 },
    { queue, type: 'refuse', payload: {} },
    { queue, type: 'boom', payload: {}, maxAttempts: 1 },
  ]);
  await waitFor(
    async () => {
      const counts = (await tl.ledger.stats(queue))[0]?.counts;
      return counts?.completed.count === 4 && counts.dead.count === 2 ? true : undefined;
    },
    15_000,
    '4 completed and 2 dead',
  );
}

test('two workers in one process: each has its own process metrics; one ' +
  'exports the fleet-wide gauges, the other takes them over at its stop', async () => {
  const { tl, tw, queue } = await fixtures();
  const workers = [await start(tl, tw, queue), await start(tl, tw, queue)];
  await feed(tl, tw, queue);

  // Exactly one exports the fleet's count, once it has counted everything.
  const exporter = await waitFor(
    async () => {
      const texts = await Promise.all(workers.map(scrape));
      const holding = workers.filter((w) => w.metrics.exportsFleetGauges);
      return holding.length === 1 &&
        texts.some((t) => t.includes(`lanewake_items{queue="${queue}",state="completed"} 4`))
        ? holding[0]
        : undefined;
    },
    10_000,
    'one exporter with the count',
  );
  const other = workers.find((w) => w !== exporter);
  if (!exporter || !other) throw new Error('two workers expected');
  const [held, notHeld] = await Promise.all([scrape(exporter), scrape(other)]);
  expect(series(held, 'lanewake_items').filter((l) => l.includes(`queue="${queue}"`))).toHaveLength(7); // one per state
  expect(held).toContain(`lanewake_items{queue="${queue}",state="dead"} 2`);
  // Each count says whether it is exact (0) or a floor at its cap (1).
  expect(held).toContain(`lanewake_items_at_least{queue="${queue}",state="completed"} 0`);
  expect(held).toContain(`lanewake_queue_paused{queue="${queue}"} 0`);
  expect(held).toMatch(/^lanewake_fleet_gauges_exporter 1$/m);
  for (const name of [
    'lanewake_items',
    'lanewake_items_at_least',
    'lanewake_oldest_due_age_seconds',
    'lanewake_items_scheduled',
    'lanewake_queue_paused',
  ]) {
    expect(series(notHeld, name), name).toEqual([]);
  }
  expect(notHeld).toMatch(/^lanewake_fleet_gauges_exporter 0$/m);

  // Per-process series stay on both: their own work and their own Node process metrics, under the standard names.
  for (const text of [held, notHeld]) {
    expect(series(text, 'process_cpu_user_seconds_total')).toHaveLength(1);
    expect(series(text, 'nodejs_heap_size_used_bytes')).toHaveLength(1);
    expect(series(text, 'lanewake_in_flight')).toEqual([`lanewake_in_flight{queue="${queue}"} 0`]);
  }
  const claimed = (text: string): number =>
    series(text, 'lanewake_items_claimed_total').reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
  expect(claimed(held) + claimed(notHeld)).toBe(6);

  // The exporter stops: it gives the lease up, and the other takes the gauges over at its next pass.
  await exporter.stop();
  await waitFor(
    async () =>
      (other.metrics.exportsFleetGauges &&
        (await scrape(other)).includes(`lanewake_items{queue="${queue}",state="completed"} 4`)) ||
      undefined,
    10_000,
    'the other exports',
  );
}, 40_000);

test('a holder whose refreshes stop exports nothing once its lease runs out here; another then takes it', async () => {
  const { tl, queue } = await fixtures();
  await tl.ledger.enqueue({ queue, type: 't', payload: {} });
  const a = new LanewakeMetrics({ defaultMetrics: false });
  const b = new LanewakeMetrics({ defaultMetrics: false });
  const items = async (m: LanewakeMetrics): Promise<string[]> =>
    series(await m.metrics(), 'lanewake_items').filter((l) => l.includes(`queue="${queue}"`));
  // The lease is long enough for the steps between a take and the next check on a busy machine.
  const opts = { everyMs: 0, leaseMs: 1_500 };

  expect(await a.refreshFleetGauges(tl.ledger, opts)).toBe(true);
  expect(await b.refreshFleetGauges(tl.ledger, opts)).toBe(false);
  expect(await items(a)).toContain(`lanewake_items{queue="${queue}",state="pending"} 1`);
  expect(await items(b)).toEqual([]);
  // The holder renews its own lease; the other still may not take it.
  expect(await a.refreshFleetGauges(tl.ledger, opts)).toBe(true);
  expect(await b.refreshFleetGauges(tl.ledger, opts)).toBe(false);

  // a stops refreshing: past its lease (as it counts it, never later than the ledger) it exports nothing.
  await waitFor(async () => ((await items(a)).length === 0 ? true : undefined), 5_000, 'a drops the gauges');
  expect(a.exportsFleetGauges).toBe(false);
  await waitFor(
    () => b.refreshFleetGauges(tl.ledger, opts).then((took) => took || undefined),
    5_000,
    'b takes the lease',
  );
  expect(await items(b)).toContain(`lanewake_items{queue="${queue}",state="pending"} 1`);
  expect(await a.refreshFleetGauges(tl.ledger, opts)).toBe(false);
  expect(await items(a)).toEqual([]);

  // A release hands it on at once.
  await b.releaseFleetGauges(tl.ledger);
  expect(await items(b)).toEqual([]);
  expect(await a.refreshFleetGauges(tl.ledger, opts)).toBe(true);
});

test('promtool check metrics finds nothing in the ' +
  '/metrics of a worker that ran items of several types', async (ctx) => {
  needPromtool(ctx);
  const { tl, tw, queue } = await fixtures();
  const w = await start(tl, tw, queue);
  await feed(tl, tw, queue);
  await waitFor(() => w.metrics.exportsFleetGauges || undefined, 10_000, 'the worker exports the fleet-wide gauges');
  const text = await scrape(w);
  // Every kind of series is in what promtool reads: counters, histograms, per-process and fleet-wide gauges, Node's
  // (not its GC histogram: it has no series until a collection since the worker started).
  for (const name of [
    'lanewake_items_completed_total',
    'lanewake_handler_duration_seconds_bucket',
    'lanewake_queue_lag_seconds_bucket',
    'lanewake_items',
    'process_cpu_seconds_total',
    'nodejs_heap_space_size_used_bytes',
    'nodejs_eventloop_lag_seconds',
  ]) {
    expect(text, name).toMatch(new RegExp(`^${name}[{ ]`, 'm'));
  }
  expect(promtool(['check', 'metrics'], text)).toEqual({ status: 0, output: '' });
}, 30_000);
