import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { register as globalRegistry } from 'prom-client';
import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { PermanentError } from '../src/consumer/errors.js';
import { Ledger } from '../src/ledger/ledger.js';
import { SCHEMA_VERSION } from '../src/ledger/migrations.js';
import { Producer } from '../src/producer/producer.js';
import { ledgerReadiness, startAdminServer, type AdminServer, type Readiness } from '../src/supervisor/admin-server.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { LATENCY_BUCKETS_SECONDS, LanewakeMetrics } from '../src/supervisor/metrics.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  // Last acquired, first released: servers and consumers before the ledgers they use.
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function testLedger(migrate = true): Promise<TestLedger> {
  const tl = await createTestLedger({}, migrate);
  cleanups.push(tl.drop);
  return tl;
}

async function server(options: Partial<Parameters<typeof startAdminServer>[0]> & { ledger: Ledger; metrics?: LanewakeMetrics }): Promise<AdminServer> {
  const { ledger, ...rest } = options;
  const s = await startAdminServer({
    port: 0,
    metrics: rest.metrics ?? new LanewakeMetrics({ defaultMetrics: false }),
    readiness: () => ledgerReadiness(ledger),
    dashboard: { backend: () => ({ ledger }), staticDir: join(tmpdir(), 'lanewake-no-dashboard-bundle') },
    version: '9.8.7-test',
    ...rest,
  });
  cleanups.push(() => s.close());
  return s;
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the Prometheus text format's sample lines (comments skipped). */
function parseSamples(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1] ?? ''] = l[2] ?? '';
    samples.push({ name: m[1] ?? '', labels, value: Number(m[3]) });
  }
  return samples;
}

/** The value of the one sample of `name` whose labels include `labels`; fails when there is not exactly one. */
function valueOf(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  expect(found, `${name}${JSON.stringify(labels)}`).toHaveLength(1);
  return found[0]?.value ?? Number.NaN;
}

test('/metrics: claims, outcomes, latencies, wake reads and depth of a running consumer', async () => {
  const tl = await testLedger();
  const tw: TestWake = createTestWake();
  cleanups.push(tw.drop);
  const queue = uniqueQueue('adm');
  const metrics = new LanewakeMetrics();
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 8,
    pollIntervalMs: 60_000,
    handlers: {
      ok: async () => 'done',
      refuse: async () => {
        throw new PermanentError('never valid');
      },
      boom: async () => {
        throw new Error('boom');
      },
    },
  });
  const unsubscribe = metrics.observeConsumer(consumer);
  cleanups.push(async () => {
    unsubscribe();
    await consumer.stop({ drainTimeoutMs: 2_000 });
  });
  // Each start's enqueue->start latency (ms since the item's created_at) as read just before and just
  // after the metrics' own 'started' listener: the histogram's observation lies between the two.
  const latencyMs = new Map<string, { type: string; before: number; after: number }>();
  const beforeMetrics = (item: ClaimedItem): void => {
    latencyMs.set(item.id, { type: item.type, before: Date.now() - item.createdAt.getTime(), after: Number.NaN });
  };
  const afterMetrics = (item: ClaimedItem): void => {
    const l = latencyMs.get(item.id);
    if (l) l.after = Date.now() - item.createdAt.getTime();
  };
  consumer.prependListener('started', beforeMetrics);
  consumer.on('started', afterMetrics);
  // The consumer's first (empty) claim round is over before anything is enqueued,
  // so the items reach it through wake-up entries, which the metrics count.
  const firstRound = once(consumer, 'claimRound');
  await consumer.start();
  await firstRound;
  const admin = await server({ ledger: tl.ledger, metrics });

  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  await producer.enqueueMany([
    { queue, type: 'ok', payload: { n: 1 } },
    { queue, type: 'ok', payload: { n: 2 }, lane: 'L' },
    { queue, type: 'ok', payload: { n: 3 }, lane: 'L' },
    { queue, type: 'refuse', payload: {} },
    { queue, type: 'boom', payload: {}, maxAttempts: 1 },
  ]);
  await waitFor(() => consumer.counters.completed === 3 && consumer.counters.dead === 2, 10_000, '3 completed and 2 dead');
  await metrics.refreshDepth(tl.ledger, 0);

  const res = await fetch(`${admin.url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  const samples = parseSamples(await res.text());
  const q = { queue };

  // Event counters, per queue and type.
  expect(valueOf(samples, 'lanewake_items_claimed_total', { queue, type: 'ok' })).toBe(3);
  expect(valueOf(samples, 'lanewake_items_claimed_total', { queue, type: 'refuse' })).toBe(1);
  expect(valueOf(samples, 'lanewake_items_completed_total', { queue, type: 'ok' })).toBe(3);
  expect(valueOf(samples, 'lanewake_items_dead_total', { queue, type: 'refuse' })).toBe(1);
  expect(valueOf(samples, 'lanewake_items_dead_total', { queue, type: 'boom' })).toBe(1);
  for (const name of ['lanewake_items_retried_total', 'lanewake_items_released_total', 'lanewake_lease_lost_total']) {
    expect(samples.filter((s) => s.name === name && s.labels.queue === queue), name).toEqual([]);
  }
  const wakeRead = valueOf(samples, 'lanewake_wake_entries_read_total', q);
  expect(wakeRead).toBeGreaterThan(0);
  expect(wakeRead).toBeLessThanOrEqual(consumer.counters.wakeEntriesRead);

  // Latency histograms.
  const starts = samples.filter((s) => s.name === 'lanewake_enqueue_to_start_seconds_count' && s.labels.queue === queue);
  expect(starts.reduce((n, s) => n + s.value, 0)).toBe(5);
  expect(valueOf(samples, 'lanewake_enqueue_to_start_seconds_count', { queue, type: 'ok' })).toBe(3);
  expect(latencyMs.size).toBe(5);
  for (const type of ['ok', 'refuse', 'boom']) {
    const measured = [...latencyMs.values()].filter((l) => l.type === type);
    expect(measured.length, type).toBe(type === 'ok' ? 3 : 1);
    // The sum is the sum of the observed latencies: between what was measured just before and just after.
    const sum = valueOf(samples, 'lanewake_enqueue_to_start_seconds_sum', { queue, type });
    const lowest = measured.reduce((n, l) => n + l.before, 0) / 1000;
    const highest = measured.reduce((n, l) => n + l.after, 0) / 1000;
    expect(lowest, type).toBeGreaterThan(0); // commit, wake-up and claim lie between an enqueue and its start
    expect(sum, type).toBeGreaterThanOrEqual(lowest - 1e-9);
    expect(sum, type).toBeLessThanOrEqual(highest + 1e-9);
    // Buckets are cumulative over the configured bounds, and each holds exactly the starts at or under its
    // bound: every one measured under it (after <= le) and none measured over it (before > le).
    const buckets = samples.filter((s) => s.name === 'lanewake_enqueue_to_start_seconds_bucket' && s.labels.queue === queue && s.labels.type === type);
    expect(buckets.map((b) => b.labels.le), type).toEqual([...LATENCY_BUCKETS_SECONDS.map(String), '+Inf']);
    for (let i = 1; i < buckets.length; i++) {
      expect(buckets[i]?.value, `${type} le=${buckets[i]?.labels.le} (cumulative)`).toBeGreaterThanOrEqual(buckets[i - 1]?.value ?? Number.NaN);
    }
    expect(buckets.at(-1)?.value, type).toBe(measured.length);
    expect(valueOf(samples, 'lanewake_enqueue_to_start_seconds_count', { queue, type }), type).toBe(measured.length);
    for (const bucket of buckets.slice(0, -1)) {
      const le = Number(bucket.labels.le);
      const surelyIn = measured.filter((l) => l.after / 1000 <= le).length;
      const maybeIn = measured.filter((l) => l.before / 1000 <= le).length;
      expect(bucket.value, `${type} le=${le}`).toBeGreaterThanOrEqual(surelyIn);
      expect(bucket.value, `${type} le=${le}`).toBeLessThanOrEqual(maybeIn);
    }
  }
  const claimRounds = valueOf(samples, 'lanewake_claim_duration_seconds_count', q);
  expect(claimRounds).toBeGreaterThan(0);
  expect(claimRounds).toBeLessThanOrEqual(consumer.counters.claimRounds);
  expect(valueOf(samples, 'lanewake_claim_duration_seconds_sum', q)).toBeGreaterThan(0);

  // Depth from the ledger, and live process state.
  expect(valueOf(samples, 'lanewake_items', { queue, state: 'completed' })).toBe(3);
  expect(valueOf(samples, 'lanewake_items', { queue, state: 'dead' })).toBe(2);
  expect(valueOf(samples, 'lanewake_items', { queue, state: 'pending' })).toBe(0);
  expect(valueOf(samples, 'lanewake_items', { queue, state: 'processing' })).toBe(0);
  expect(valueOf(samples, 'lanewake_oldest_due_age_seconds', q)).toBe(0);
  expect(valueOf(samples, 'lanewake_in_flight', q)).toBe(0);
  expect(valueOf(samples, 'lanewake_redis_connected')).toBe(1);

  // Node process metrics on the same registry, prefixed; nothing on prom-client's global registry.
  expect(valueOf(samples, 'lanewake_process_cpu_user_seconds_total')).toBeGreaterThan(0);
  expect(samples.some((s) => s.name === 'lanewake_nodejs_heap_size_used_bytes')).toBe(true);
  expect(await globalRegistry.getMetricsAsJSON()).toEqual([]);

  // Unsubscribing detaches every listener (the test's own two taken off first).
  consumer.off('started', beforeMetrics);
  consumer.off('started', afterMetrics);
  const listeners = (): number => consumer.listenerCount('started') + consumer.listenerCount('outcome') + consumer.listenerCount('claimRound');
  expect(listeners()).toBe(3);
  unsubscribe();
  expect(listeners()).toBe(0);
}, 15_000);

test('/metrics: items handed over under the consumer\'s offers, by queue', async () => {
  const tl = await testLedger();
  const tw: TestWake = createTestWake();
  cleanups.push(tw.drop);
  const queue = uniqueQueue('adm-offer');
  const metrics = new LanewakeMetrics();
  const consumer = new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 4, pollIntervalMs: 60_000, handlers: { ok: async () => 'done' } });
  const unsubscribe = metrics.observeConsumer(consumer);
  cleanups.push(async () => {
    unsubscribe();
    await consumer.stop({ drainTimeoutMs: 2_000 });
  });
  await consumer.start();
  const admin = await server({ ledger: tl.ledger, metrics });
  const scrape = async (): Promise<number> => valueOf(parseSamples(await (await fetch(`${admin.url}/metrics`)).text()), 'lanewake_items_handed_over_total', { queue });
  expect(await scrape()).toBe(0);

  // One item through the stream warms the consumer; it then stands an offer, which the next item takes.
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  await producer.enqueue({ queue, type: 'ok', payload: { n: 1 } });
  await waitFor(() => consumer.counters.offersMade > 0 || undefined, 10_000, 'an offer');
  await producer.enqueue({ queue, type: 'ok', payload: { n: 2 } });
  await waitFor(() => consumer.counters.completed === 2 || undefined, 10_000, 'both completed');
  expect(consumer.counters.handedOver).toBe(1);
  expect(await scrape()).toBe(1);
});

test('/livez, /readyz, /version, /api/queues, the dashboard page without its bundle, 404 and 405 on a migrated ledger', async () => {
  const tl = await testLedger();
  const queue = uniqueQueue('adm');
  await tl.ledger.enqueue({ queue, type: 't', payload: {} });
  const admin = await server({ ledger: tl.ledger });
  expect(admin.url).toBe(`http://127.0.0.1:${admin.port}`);
  expect(admin.port).toBeGreaterThan(0);

  const live = await fetch(`${admin.url}/livez`);
  expect(live.status).toBe(200);
  expect(await live.text()).toBe('ok\n');

  const ready = await fetch(`${admin.url}/readyz`);
  expect(ready.status).toBe(200);
  expect(ready.headers.get('content-type')).toMatch(/^application\/json/);
  expect(await ready.json()).toEqual({
    ready: true,
    checks: { ledger: { ok: true }, migrations: { ok: true, detail: `schema version ${SCHEMA_VERSION}` } },
  });

  const version = await fetch(`${admin.url}/version`);
  expect(version.status).toBe(200);
  expect(await version.json()).toEqual({ name: 'lanewake', version: '9.8.7-test', node: process.version });

  const queues = await fetch(`${admin.url}/api/queues?ignored=1`);
  expect(queues.status).toBe(200);
  const list = (await queues.json()) as { queue: string; counts: Record<string, number> }[];
  expect(list).toHaveLength(1);
  expect(list[0]).toMatchObject({ queue, counts: { pending: 1, dead: 0 } });

  // The bundle is not built here (test/dashboard.test.ts serves one): the page says how to build it.
  const page = await fetch(`${admin.url}/`);
  expect(page.status).toBe(503);
  expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
  expect(await page.text()).toContain('npm run build:dashboard');

  const missing = await fetch(`${admin.url}/nope`);
  expect(missing.status).toBe(404);
  expect(await missing.json()).toEqual({ error: 'not found' });

  const post = await fetch(`${admin.url}/metrics`, { method: 'POST', body: 'x' });
  expect(post.status).toBe(405);
  expect(post.headers.get('allow')).toBe('GET');
  const del = await fetch(`${admin.url}/livez`, { method: 'DELETE' });
  expect(del.status).toBe(405);

  await admin.close();
  await expect(fetch(`${admin.url}/livez`)).rejects.toThrow();
});

test('/readyz is 503 on an unmigrated database, naming the migrations check', async () => {
  const tl = await testLedger(false);
  const admin = await server({ ledger: tl.ledger });
  const res = await fetch(`${admin.url}/readyz`);
  expect(res.status).toBe(503);
  const body = (await res.json()) as Readiness;
  expect(body.ready).toBe(false);
  expect(body.checks.ledger).toEqual({ ok: true });
  expect(body.checks.migrations?.ok).toBe(false);
  expect(body.checks.migrations?.detail).toContain(`behind the required ${SCHEMA_VERSION}`);
});

test('ledgerReadiness: unreachable ledger, failing, throwing and hanging extra checks are not ready', async () => {
  const tl = await testLedger();
  const passing = { name: 'ownership:a', check: async () => ({ ok: true, detail: 'epoch 1' }) };
  expect(await ledgerReadiness(tl.ledger, [passing])).toEqual({
    ready: true,
    checks: { ledger: { ok: true }, migrations: { ok: true, detail: `schema version ${SCHEMA_VERSION}` }, 'ownership:a': { ok: true, detail: 'epoch 1' } },
  });

  const r = await ledgerReadiness(
    tl.ledger,
    [
      passing,
      { name: 'ownership:b', check: async () => ({ ok: false, detail: 'epoch 2 superseded by 3' }) },
      { name: 'ownership:c', check: () => Promise.reject(new Error('control stream gone')) },
      { name: 'ownership:d', check: () => new Promise(() => undefined) },
      // A repeated name keeps the failure.
      { name: 'ownership:b', check: async () => ({ ok: true }) },
    ],
    { timeoutMs: 200 },
  );
  expect(r.ready).toBe(false);
  expect(r.checks).toEqual({
    ledger: { ok: true },
    migrations: { ok: true, detail: `schema version ${SCHEMA_VERSION}` },
    'ownership:a': { ok: true, detail: 'epoch 1' },
    'ownership:b': { ok: false, detail: 'epoch 2 superseded by 3' },
    'ownership:c': { ok: false, detail: 'control stream gone' },
    'ownership:d': { ok: false, detail: 'no answer within 200 ms' },
  });

  // Nothing listens on port 1: connection refused at once.
  const gone = new Ledger({ url: 'mysql://root@127.0.0.1:1/lanewake_gone', poolSize: 1 });
  try {
    const down = await ledgerReadiness(gone, [], { timeoutMs: 5_000 });
    expect(down.ready).toBe(false);
    expect(down.checks.ledger?.ok).toBe(false);
    expect(down.checks.ledger?.detail).toMatch(/ECONNREFUSED/);
    expect(down.checks.migrations?.ok).toBe(false);
  } finally {
    await gone.close().catch(() => undefined);
  }
});

test('a failing route answers 500 with a JSON error and the server keeps serving', async () => {
  const tl = await testLedger();
  const admin = await server({
    ledger: tl.ledger,
    dashboard: {
      backend: () => {
        throw new Error('stats exploded');
      },
    },
    readiness: () => {
      throw new Error('readiness exploded');
    },
  });
  const queues = await fetch(`${admin.url}/api/queues`);
  expect(queues.status).toBe(500);
  expect(await queues.json()).toEqual({ error: 'stats exploded' });
  const ready = await fetch(`${admin.url}/readyz`);
  expect(ready.status).toBe(500);
  expect(await ready.json()).toEqual({ error: 'readiness exploded' });
  const live = await fetch(`${admin.url}/livez`);
  expect(live.status).toBe(200);
});
