// The admin server's /metrics: what a running consumer counts and measures, and the items handed over under its offers.
import { once } from 'node:events';
import { register as globalRegistry } from 'prom-client';
import { expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { PermanentError } from '../src/consumer/errors.js';
import { Producer } from '../src/producer/producer.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import type { Outcome } from '../src/consumer/job-run.js';
import { HANDLER_BUCKETS_SECONDS, WAIT_BUCKETS_SECONDS } from '../src/supervisor/metric-definitions.js';
import { LanewakeMetrics } from '../src/supervisor/metrics.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { waitFor } from './support/ledger.js';
import { adminScope } from './support/admin.js';

const { cleanups, testLedger, server } = adminScope();

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
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1] ?? ''] = l[2] ?? '';
    samples.push({ name: m[1] ?? '', labels, value: Number(m[3]) });
  }
  return samples;
}

/** The value of the one sample of `name` whose labels include `labels`; fails when there is not exactly one. */
function sampleValue(samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number {
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
  // What the queue-lag and handler-duration histograms must hold: due->claim from each started item's
  // ledger times, and each handler's run time as the outcome event reports it.
  const lagSeconds = new Map<string, number[]>();
  const handlerSeconds = new Map<string, number[]>();
  const noteStart = (item: ClaimedItem): void => {
    lagSeconds.set(item.type, [
      ...(lagSeconds.get(item.type) ?? []),
      ((item.startedAt?.getTime() ?? Number.NaN) - item.runAfter.getTime()) / 1000,
    ]);
  };
  const noteOutcome = (item: ClaimedItem, _outcome: Outcome, handlerMs: number | undefined): void => {
    handlerSeconds.set(item.type, [...(handlerSeconds.get(item.type) ?? []), (handlerMs ?? Number.NaN) / 1000]);
  };
  consumer.on('started', noteStart);
  consumer.on('outcome', noteOutcome);
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
    // Due 300 ms after its enqueue: that delay is in its enqueue->start, not in its queue lag.
    { queue, type: 'refuse', payload: {}, delayMs: 300 },
    { queue, type: 'boom', payload: {}, maxAttempts: 1 },
  ]);
  await waitFor(
    () => consumer.counters.completed === 3 && consumer.counters.dead === 2,
    10_000,
    '3 completed and 2 dead',
  );
  expect(await metrics.refreshFleetGauges(tl.ledger, { everyMs: 0 })).toBe(true);

  const res = await fetch(`${admin.url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
  const samples = parseSamples(await res.text());
  const q = { queue };

  // Event counters, per queue and type.
  expect(sampleValue(samples, 'lanewake_items_claimed_total', { queue, type: 'ok' })).toBe(3);
  expect(sampleValue(samples, 'lanewake_items_claimed_total', { queue, type: 'refuse' })).toBe(1);
  expect(sampleValue(samples, 'lanewake_items_completed_total', { queue, type: 'ok' })).toBe(3);
  expect(sampleValue(samples, 'lanewake_items_dead_total', { queue, type: 'refuse' })).toBe(1);
  expect(sampleValue(samples, 'lanewake_items_dead_total', { queue, type: 'boom' })).toBe(1);
  for (const name of ['lanewake_items_retried_total', 'lanewake_items_released_total', 'lanewake_lease_lost_total']) {
    expect(
      samples.filter((s) => s.name === name && s.labels.queue === queue),
      name,
    ).toEqual([]);
  }
  const wakeRead = sampleValue(samples, 'lanewake_wake_entries_read_total', q);
  expect(wakeRead).toBeGreaterThan(0);
  expect(wakeRead).toBeLessThanOrEqual(consumer.counters.wakeEntriesRead);

  // Latency histograms.
  const starts = samples.filter(
    (s) => s.name === 'lanewake_enqueue_to_start_seconds_count' && s.labels.queue === queue,
  );
  expect(starts.reduce((n, s) => n + s.value, 0)).toBe(5);
  expect(sampleValue(samples, 'lanewake_enqueue_to_start_seconds_count', { queue, type: 'ok' })).toBe(3);
  expect(latencyMs.size).toBe(5);
  for (const type of ['ok', 'refuse', 'boom']) {
    const measured = [...latencyMs.values()].filter((l) => l.type === type);
    expect(measured.length, type).toBe(type === 'ok' ? 3 : 1);
    // The sum is the sum of the observed latencies: between what was measured just before and just after.
    const sum = sampleValue(samples, 'lanewake_enqueue_to_start_seconds_sum', { queue, type });
    const lowest = measured.reduce((n, l) => n + l.before, 0) / 1000;
    const highest = measured.reduce((n, l) => n + l.after, 0) / 1000;
    expect(lowest, type).toBeGreaterThan(0); // commit, wake-up and claim lie between an enqueue and its start
    expect(sum, type).toBeGreaterThanOrEqual(lowest - 1e-9);
    expect(sum, type).toBeLessThanOrEqual(highest + 1e-9);
    // Buckets are cumulative over the configured bounds, and each holds exactly the starts at or under its
    // bound: every one measured under it (after <= le) and none measured over it (before > le).
    const buckets = samples.filter(
      (s) =>
        s.name === 'lanewake_enqueue_to_start_seconds_bucket' && s.labels.queue === queue && s.labels.type === type,
    );
    expect(
      buckets.map((b) => b.labels.le),
      type,
    ).toEqual([...WAIT_BUCKETS_SECONDS.map(String), '+Inf']);
    for (let i = 1; i < buckets.length; i++) {
      expect(buckets[i]?.value, `${type} le=${buckets[i]?.labels.le} (cumulative)`).toBeGreaterThanOrEqual(
        buckets[i - 1]?.value ?? Number.NaN,
      );
    }
    expect(buckets.at(-1)?.value, type).toBe(measured.length);
    expect(sampleValue(samples, 'lanewake_enqueue_to_start_seconds_count', { queue, type }), type).toBe(
      measured.length,
    );
    for (const bucket of buckets.slice(0, -1)) {
      const le = Number(bucket.labels.le);
      const surelyIn = measured.filter((l) => l.after / 1000 <= le).length;
      const maybeIn = measured.filter((l) => l.before / 1000 <= le).length;
      expect(bucket.value, `${type} le=${le}`).toBeGreaterThanOrEqual(surelyIn);
      expect(bucket.value, `${type} le=${le}`).toBeLessThanOrEqual(maybeIn);
    }
  }
  // Queue lag (due -> claim, on the ledger clock) and handler run time: exactly what each start and outcome reported.
  const sumOf = (xs: readonly number[] | undefined): number => (xs ?? []).reduce((a, b) => a + b, 0);
  for (const type of ['ok', 'refuse', 'boom']) {
    const lags = lagSeconds.get(type);
    expect(sampleValue(samples, 'lanewake_queue_lag_seconds_count', { queue, type }), type).toBe(lags?.length);
    expect(sampleValue(samples, 'lanewake_queue_lag_seconds_sum', { queue, type }), type).toBeCloseTo(sumOf(lags), 6);
    const runs = handlerSeconds.get(type);
    expect(sampleValue(samples, 'lanewake_handler_duration_seconds_count', { queue, type }), type).toBe(
      type === 'ok' ? 3 : 1,
    );
    expect(sampleValue(samples, 'lanewake_handler_duration_seconds_sum', { queue, type }), type).toBeCloseTo(
      sumOf(runs),
      6,
    );
    const lagBuckets = samples.filter(
      (s) => s.name === 'lanewake_queue_lag_seconds_bucket' && s.labels.queue === queue && s.labels.type === type,
    );
    expect(
      lagBuckets.map((b) => b.labels.le),
      type,
    ).toEqual([...WAIT_BUCKETS_SECONDS.map(String), '+Inf']);
    const runBuckets = samples.filter(
      (s) =>
        s.name === 'lanewake_handler_duration_seconds_bucket' && s.labels.queue === queue && s.labels.type === type,
    );
    expect(
      runBuckets.map((b) => b.labels.le),
      type,
    ).toEqual([...HANDLER_BUCKETS_SECONDS.map(String), '+Inf']);
  }
  // The delayed item waited 300 ms from its enqueue, but its lag counts from when it was due.
  const refuseStart = sampleValue(samples, 'lanewake_enqueue_to_start_seconds_sum', { queue, type: 'refuse' });
  expect(refuseStart).toBeGreaterThanOrEqual(0.3);
  // due = created_at + 300 ms on the ledger's clock (this machine's), so lag <= enqueue->start - 0.3 (less
  // the claim-to-start step).
  expect(sampleValue(samples, 'lanewake_queue_lag_seconds_sum', { queue, type: 'refuse' })).toBeLessThanOrEqual(
    refuseStart - 0.3 + 0.005,
  );

  const claimRounds = sampleValue(samples, 'lanewake_claim_duration_seconds_count', q);
  expect(claimRounds).toBeGreaterThan(0);
  expect(claimRounds).toBeLessThanOrEqual(consumer.counters.claimRounds);
  expect(sampleValue(samples, 'lanewake_claim_duration_seconds_sum', q)).toBeGreaterThan(0);

  // Depth from the ledger, and live process state.
  expect(sampleValue(samples, 'lanewake_items', { queue, state: 'completed' })).toBe(3);
  expect(sampleValue(samples, 'lanewake_items', { queue, state: 'dead' })).toBe(2);
  expect(sampleValue(samples, 'lanewake_items', { queue, state: 'pending' })).toBe(0);
  expect(sampleValue(samples, 'lanewake_items', { queue, state: 'processing' })).toBe(0);
  expect(sampleValue(samples, 'lanewake_oldest_due_age_seconds', q)).toBe(0);
  expect(sampleValue(samples, 'lanewake_items_scheduled', q)).toBe(0);
  expect(sampleValue(samples, 'lanewake_queue_paused', q)).toBe(0);
  expect(sampleValue(samples, 'lanewake_fleet_gauges_exporter')).toBe(1);
  expect(sampleValue(samples, 'lanewake_in_flight', q)).toBe(0);
  expect(sampleValue(samples, 'lanewake_consumer_paused', q)).toBe(0);
  expect(sampleValue(samples, 'lanewake_redis_connected')).toBe(1);

  // Node process metrics on the same registry under their standard names, without the gauges named
  // like counters; nothing on prom-client's global registry.
  expect(sampleValue(samples, 'process_cpu_user_seconds_total')).toBeGreaterThan(0);
  expect(samples.some((s) => s.name === 'nodejs_heap_size_used_bytes')).toBe(true);
  expect(samples.some((s) => s.name === 'nodejs_eventloop_lag_seconds')).toBe(true);
  expect(samples.filter((s) => /^nodejs_active_\w+_total$/.test(s.name))).toEqual([]);
  expect(
    samples.filter((s) => s.name.startsWith('lanewake_process_') || s.name.startsWith('lanewake_nodejs_')),
  ).toEqual([]);
  expect(await globalRegistry.getMetricsAsJSON()).toEqual([]);

  // Unsubscribing detaches every listener (the test's own two taken off first).
  consumer.off('started', beforeMetrics);
  consumer.off('started', afterMetrics);
  consumer.off('started', noteStart);
  consumer.off('outcome', noteOutcome);
  const listeners = (): number =>
    consumer.listenerCount('started') + consumer.listenerCount('outcome') + consumer.listenerCount('claimRound');
  expect(listeners()).toBe(3);
  unsubscribe();
  expect(listeners()).toBe(0);
}, 15_000);

test("/metrics: items handed over under the consumer's offers, by queue", async () => {
  const tl = await testLedger();
  const tw: TestWake = createTestWake();
  cleanups.push(tw.drop);
  const queue = uniqueQueue('adm-offer');
  const metrics = new LanewakeMetrics();
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 4,
    pollIntervalMs: 60_000,
    handlers: { ok: async () => 'done' },
  });
  const unsubscribe = metrics.observeConsumer(consumer);
  cleanups.push(async () => {
    unsubscribe();
    await consumer.stop({ drainTimeoutMs: 2_000 });
  });
  await consumer.start();
  const admin = await server({ ledger: tl.ledger, metrics });
  const scrape = async (): Promise<number> =>
    sampleValue(parseSamples(await (await fetch(`${admin.url}/metrics`)).text()), 'lanewake_items_handed_over_total', {
      queue,
    });
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
