import * as otelApi from '@opentelemetry/api';
import { sql } from 'kysely';
import { context, metrics, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
  type HistogramMetricData,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { migrate } from '../src/ledger/migrations.js';
import { Producer } from '../src/producer/producer.js';
import { setOtelForTesting } from '../src/tracing/otel.js';
import { traceAttempt } from '../src/tracing/process.js';
import { freshQueue } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { testScope } from './support/scope.js';

// OpenTelemetry tracing (docs/operations/observing.md, Tracing): the SDK's in-memory
// exporters, registered globally with an AsyncLocalStorage context manager.

const spans = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
const meterProvider = new MeterProvider({ readers: [reader] });
const app = trace.getTracer('app');

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(tracerProvider);
  metrics.setGlobalMeterProvider(meterProvider);
});
afterAll(async () => {
  trace.disable();
  metrics.disable();
  context.disable();
  await tracerProvider.shutdown();
  await meterProvider.shutdown();
});
beforeEach(() => spans.reset());

const scope = testScope();
let tl: TestLedger;
beforeEach(async () => {
  tl = await scope.ledger();
});

/** A database of the test's own with no tables, dropped after the test. */
async function unmigrated(): Promise<TestLedger> {
  const bare = await createTestLedger({}, false);
  scope.cleanup(() => bare.drop());
  return bare;
}

/** Runs `fn` inside a fresh application span, ended after. */
async function inSpan<T>(name: string, fn: (span: Span) => Promise<T>): Promise<T> {
  return app.startActiveSpan(name, async (span) => {
    try {
      return await fn(span);
    } finally {
      span.end();
    }
  });
}

function finished(name: string): ReadableSpan[] {
  return spans.getFinishedSpans().filter((s) => s.name === name);
}

function traceparentOf(span: { spanContext(): { traceId: string; spanId: string } }): string {
  const sc = span.spanContext();
  return `00-${sc.traceId}-${sc.spanId}-01`;
}

async function storedTraceparent(id: string): Promise<string | null | undefined> {
  return (await tl.ledger.get(id))?.traceparent;
}

describe('publish spans', () => {
  test('ledger.enqueue in an active span: a PRODUCER span, child of it, whose context the item stores', async () => {
    const queue = freshQueue('otel');
    const { id, parent } = await inSpan('request', async (span) => ({
      id: (await tl.ledger.enqueue({ queue, type: 't', payload: {} })).id,
      parent: span,
    }));
    const [publish, ...more] = finished(`publish ${queue}`);
    expect(more).toHaveLength(0);
    expect(publish?.kind).toBe(SpanKind.PRODUCER);
    expect(publish?.parentSpanContext?.spanId).toBe(parent.spanContext().spanId);
    expect(publish?.spanContext().traceId).toBe(parent.spanContext().traceId);
    expect(publish?.attributes).toMatchObject({
      'messaging.system': 'lanewake',
      'messaging.operation.name': 'publish',
      'messaging.operation.type': 'send',
      'messaging.destination.name': queue,
      'messaging.message.id': id,
      'lanewake.item.type': 't',
    });
    expect(publish?.attributes['messaging.batch.message_count']).toBeUndefined();
    expect(await storedTraceparent(id)).toBe(traceparentOf(publish!));
  });

  test('enqueueMany: one span per queue, with the batch count; every item of a queue stores its span', async () => {
    const [a, b] = [freshQueue('otel-a'), freshQueue('otel-b')];
    const made = await inSpan('batch', () =>
      tl.ledger.enqueueMany([
        { queue: a, type: 't', payload: 1 },
        { queue: b, type: 't', payload: 2, lane: 'l' },
        { queue: a, type: 't', payload: 3 },
      ]),
    );
    const [pa] = finished(`publish ${a}`);
    const [pb] = finished(`publish ${b}`);
    expect(pa?.attributes['messaging.batch.message_count']).toBe(2);
    expect(pb?.attributes['messaging.batch.message_count']).toBe(1);
    expect(pa?.attributes['messaging.message.id']).toBeUndefined();
    expect(await Promise.all(made.map((r) => storedTraceparent(r.id)))).toEqual([
      traceparentOf(pa!),
      traceparentOf(pb!),
      traceparentOf(pa!),
    ]);
  });

  test("the producer's single enqueues keep their callers' traces, batched together or not", async () => {
    const queue = freshQueue('otel-singles');
    const producer = new Producer({ ledger: tl.ledger });
    // More callers at once than the producer sends alone: the later ones go out as one batch.
    const calls = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        inSpan(`caller-${i}`, async (span) => ({
          span,
          r: await producer.enqueue({ queue, type: 't', payload: { i } }),
        })),
      ),
    );
    const publishes = finished(`publish ${queue}`);
    expect(publishes).toHaveLength(8);
    for (const { span, r } of calls) {
      const tp = await storedTraceparent(r.id);
      const mine = publishes.find((p) => p.attributes['messaging.message.id'] === r.id);
      expect(mine?.parentSpanContext?.spanId).toBe(span.spanContext().spanId);
      expect(tp).toBe(traceparentOf(mine!));
    }
  });

  test("items enqueued in the caller's transaction carry the traceparent too", async () => {
    const queue = freshQueue('otel-tx');
    const producer = new Producer({ ledger: tl.ledger });
    const [viaProducer, viaLedger] = await inSpan('tx', () =>
      producer.transaction(tl.ledger.db, async (tx) => [
        await tx.enqueue({ queue, type: 't', payload: 1 }),
        await tl.ledger.enqueue({ queue, type: 't', payload: 2, lane: 'x' }, { transaction: tx.trx }),
      ]),
    );
    const publishes = finished(`publish ${queue}`);
    expect(publishes).toHaveLength(2);
    for (const r of [viaProducer!, viaLedger!]) {
      const mine = publishes.find((p) => p.attributes['messaging.message.id'] === r.id);
      expect(await storedTraceparent(r.id)).toBe(traceparentOf(mine!));
    }
  });

  test('an enqueue the database refuses: the error on its span', async () => {
    const queue = freshQueue('otel-refused');
    const bare = await unmigrated();
    const err = await bare.ledger.enqueue({ queue, type: 't', payload: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    const [publish] = finished(`publish ${queue}`);
    expect(publish?.status.code).toBe(SpanStatusCode.ERROR);
    expect(publish?.events.some((e) => e.name === 'exception')).toBe(true);
  });
});

describe('process spans', () => {
  async function consumerOf(queue: string, handle: (span: Span | undefined) => Promise<void>): Promise<Consumer> {
    const c = new Consumer({
      ledger: tl.ledger,
      queue,
      concurrency: 2,
      pollIntervalMs: 50,
      handlers: { t: () => handle(trace.getActiveSpan()) },
    });
    await scope.start(c);
    return c;
  }

  async function processSpan(queue: string, n = 1): Promise<ReadableSpan[]> {
    return waitFor(
      () => (finished(`process ${queue}`).length >= n ? finished(`process ${queue}`) : undefined),
      10_000,
      `process ${queue}`,
    );
  }

  async function durationPoints(queue: string): Promise<{ count: number; attributes: Record<string, unknown> }[]> {
    await reader.forceFlush();
    const all = metricExporter.getMetrics().flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics));
    const histogram = all
      .filter((m): m is HistogramMetricData => m.descriptor.name === 'messaging.process.duration')
      .at(-1);
    expect(histogram?.descriptor.unit).toBe('s');
    return (histogram?.dataPoints ?? [])
      .filter((p) => p.attributes['messaging.destination.name'] === queue)
      .map((p) => ({ count: p.value.count, attributes: p.attributes }));
  }

  test(
    "an attempt's CONSUMER span: a child of the publish span and " +
      'linked to it, the handler inside it; the histogram has a point',
    async () => {
      const queue = freshQueue('otel-process');
      let seen: Span | undefined;
      await consumerOf(queue, async (span) => void (seen = span));
      const { id } = await inSpan('request', () => tl.ledger.enqueue({ queue, type: 't', payload: {} }));
      const [processed] = await processSpan(queue);
      const [publish] = finished(`publish ${queue}`);
      expect(processed?.kind).toBe(SpanKind.CONSUMER);
      expect(processed?.links.map((l) => l.context.spanId)).toEqual([publish?.spanContext().spanId]);
      expect(processed?.parentSpanContext?.spanId).toBe(publish?.spanContext().spanId);
      expect(processed?.spanContext().traceId).toBe(publish?.spanContext().traceId);
      expect(seen?.spanContext().spanId).toBe(processed?.spanContext().spanId);
      expect(processed?.attributes).toMatchObject({
        'messaging.system': 'lanewake',
        'messaging.operation.name': 'process',
        'messaging.operation.type': 'process',
        'messaging.destination.name': queue,
        'messaging.message.id': id,
        'lanewake.attempt': 1,
        'lanewake.outcome': 'completed',
      });
      expect(processed?.status.code).toBe(SpanStatusCode.UNSET);
      expect(await durationPoints(queue)).toEqual([
        {
          count: 1,
          attributes: expect.objectContaining({
            'messaging.operation.name': 'process',
            'lanewake.outcome': 'completed',
          }) as unknown,
        },
      ]);
    },
  );

  test('a failing handler: the exception and status ERROR on the span, the outcome as an attribute', async () => {
    const queue = freshQueue('otel-fail');
    await consumerOf(queue, () => Promise.reject(new TypeError('boom')));
    await tl.ledger.enqueue({ queue, type: 't', payload: {}, maxAttempts: 1 });
    const [processed] = await processSpan(queue);
    expect(processed?.status).toEqual({ code: SpanStatusCode.ERROR, message: 'boom' });
    expect(processed?.attributes).toMatchObject({ 'lanewake.outcome': 'dead', 'error.type': 'TypeError' });
    const exception = processed?.events.find((e) => e.name === 'exception');
    expect(exception?.attributes).toMatchObject({ 'exception.type': 'TypeError', 'exception.message': 'boom' });
    expect(await durationPoints(queue)).toEqual([
      {
        count: 1,
        attributes: expect.objectContaining({ 'error.type': 'TypeError', 'lanewake.outcome': 'dead' }) as unknown,
      },
    ]);
  });

  test(
    "ctx.stage: an INTERNAL child span of the attempt's per " +
      'stage, named by it; a stage that throws has status ERROR',
    async () => {
      const queue = freshQueue('otel-stage');
      const c = new Consumer({
        ledger: tl.ledger,
        queue,
        concurrency: 2,
        pollIntervalMs: 50,
        handlers: {
          t: async (_job, ctx) => {
            await ctx.stage('fetch', async () => 1);
            await ctx.stage('write', async () => {
              throw new Error('refused');
            });
          },
        },
      });
      await scope.start(c);
      const { id } = await tl.ledger.enqueue({ queue, type: 't', payload: {}, maxAttempts: 1 });
      const [processed] = await processSpan(queue);
      const [fetch] = finished('stage fetch');
      const [write] = finished('stage write');
      expect(fetch?.kind).toBe(SpanKind.INTERNAL);
      expect(fetch?.parentSpanContext?.spanId).toBe(processed?.spanContext().spanId);
      expect(write?.parentSpanContext?.spanId).toBe(processed?.spanContext().spanId);
      expect(fetch?.attributes).toMatchObject({
        'lanewake.stage': 'fetch',
        'messaging.message.id': id,
        'lanewake.item.type': 't',
      });
      expect(fetch?.status.code).toBe(SpanStatusCode.UNSET);
      expect(write?.status).toEqual({ code: SpanStatusCode.ERROR, message: 'refused' });
    },
  );

  test(
    'an item without a traceparent starts a trace of its own, with ' +
      'no link: never a child of the context the consumer is in',
    async () => {
      const item = { id: 'no-trace', queue: freshQueue('otel-root'), type: 't', attempt: 1, traceparent: null };
      await inSpan('unrelated', () => traceAttempt({ item, thrown: undefined }, async () => 'completed'));
      const [processed] = finished(`process ${item.queue}`);
      expect(processed?.links).toEqual([]);
      expect(processed?.parentSpanContext).toBeUndefined();
    },
  );
});

describe('without OpenTelemetry', () => {
  test('no tracer provider registered: no traceparent stored, and the work runs', async () => {
    const queue = freshQueue('otel-none');
    trace.disable();
    try {
      const producer = new Producer({ ledger: tl.ledger });
      const made = [
        await producer.enqueue({ queue, type: 't', payload: 1 }),
        ...(await producer.enqueueMany([{ queue, type: 't', payload: 2, lane: 'l' }])),
      ];
      expect(await Promise.all(made.map((r) => storedTraceparent(r.id)))).toEqual([null, null]);
      const done: string[] = [];
      await scope.start(
        new Consumer({
          ledger: tl.ledger,
          queue,
          concurrency: 2,
          pollIntervalMs: 50,
          handlers: { t: async (job) => void done.push(job.id) },
        }),
      );
      await waitFor(() => done.length === 2 || undefined, 10_000, 'both items run');
    } finally {
      trace.setGlobalTracerProvider(tracerProvider);
    }
    expect(spans.getFinishedSpans()).toEqual([]);
  });

  test('the package absent: nothing traced, the work runs', async () => {
    const queue = freshQueue('otel-absent');
    setOtelForTesting(null);
    try {
      const { id } = await inSpan('request', () => tl.ledger.enqueue({ queue, type: 't', payload: 1 }));
      expect(await storedTraceparent(id)).toBeNull();
      const done: string[] = [];
      await scope.start(
        new Consumer({
          ledger: tl.ledger,
          queue,
          concurrency: 1,
          pollIntervalMs: 50,
          handlers: { t: async (job) => void done.push(job.id) },
        }),
      );
      await waitFor(() => done.length === 1 || undefined, 10_000, 'the item runs');
    } finally {
      setOtelForTesting(otelApi);
    }
    expect(finished(`publish ${queue}`)).toEqual([]);
    expect(finished(`process ${queue}`)).toEqual([]);
  });

  test('a producer on schema 9 (no traceparent column) enqueues while it has no span context to store', async () => {
    const nine = await unmigrated();
    await migrate(nine.ledger.db, 'lw_', 60, 9);
    const queue = freshQueue('otel-old');
    trace.disable();
    try {
      const producer = new Producer({ ledger: nine.ledger });
      await producer.enqueue({ queue, type: 't', payload: 1 });
      await producer.enqueueMany([
        { queue, type: 't', payload: 2, lane: 'l' },
        { queue, type: 't', payload: 3, concurrencyKey: 'k' },
        { queue, type: 't', payload: 4, idempotencyKey: 'once' },
      ]);
    } finally {
      trace.setGlobalTracerProvider(tracerProvider);
    }
    const [{ n }] = (
      await sql<{ n: number }>`SELECT COUNT(*) AS n FROM lw_items WHERE queue = ${queue}`.execute(nine.ledger.db)
    ).rows as [{ n: number }];
    expect(Number(n)).toBe(4);
  });
});
