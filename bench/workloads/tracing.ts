/**
 * Tracing cost (docs/operations/observing.md, Tracing): single enqueues through the producer (50 callers), then a
 * consumer at concurrency 32 draining them with a no-op handler, Redis wake-ups, in three modes:
 *   absent  @opentelemetry/api treated as not installed (the tracing code's one check)
 *   api     the API loaded, no SDK registered (no-op spans, nothing stored)
 *   sdk     a BasicTracerProvider (BatchSpanProcessor to an exporter that drops the spans) and a MeterProvider
 *           registered: every span and histogram point made and exported
 * Node's CPU per item (enqueue and drain), which moves less with noise than wall time, and items/s drained.
 * `--items N` (default 3,000).
 */
import * as otelApi from '@opentelemetry/api';
import { context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { setOtelForTesting } from '../../src/tracing/otel.js';
import { fmt, median } from '../support.js';
import { consumers, defineWorkload, drain, numFlag, withFreshLedger } from '../workload.js';

const ITEMS = numFlag('--items', 3000);
type Mode = 'absent' | 'api' | 'sdk';
const MODES: readonly Mode[] = ['absent', 'api', 'sdk'];

interface Result {
  enqueueCpuUs: number;
  drainCpuUs: number;
  drainPerS: number;
  spans: number;
}

/** Spans made and exported, then dropped: the SDK's cost without an exporter's I/O. */
function useMode(mode: Mode): { spans: () => number; shutdown: () => Promise<void> } | undefined {
  trace.disable();
  metrics.disable();
  setOtelForTesting(mode === 'absent' ? null : otelApi);
  if (mode !== 'sdk') return undefined;
  let exported = 0;
  const exporter: SpanExporter = {
    export: (spans, done) => {
      exported += spans.length;
      done({ code: 0 });
    },
    shutdown: async () => undefined,
  };
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new BatchSpanProcessor(exporter, { maxQueueSize: 65_536 })],
  });
  const reader = new PeriodicExportingMetricReader({
    exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
    exportIntervalMillis: 3_600_000,
  });
  const meterProvider = new MeterProvider({ readers: [reader] });
  trace.setGlobalTracerProvider(tracerProvider);
  metrics.setGlobalMeterProvider(meterProvider);
  return {
    spans: () => exported,
    shutdown: async () => {
      await tracerProvider.shutdown();
      await meterProvider.shutdown();
    },
  };
}

const cpuUs = (): number => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

export default defineWorkload<Mode, Result>({
  about: "lanewake's spans and metrics: node CPU per item with OpenTelemetry absent, API only, SDK (Tracing)",
  variants: MODES,
  label: (m) => m,
  setup: () => void context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable()),
  measure: (mode) =>
    withFreshLedger(
      'lwtr',
      async (env) => {
        const sdk = useMode(mode);
        const queue = 'bench';
        // 50 callers at once, each awaiting its own single enqueues (no application span: lanewake's spans alone).
        let next = 0;
        const cpu0 = cpuUs();
        await Promise.all(
          Array.from({ length: 50 }, async () => {
            while (next < ITEMS) await env.producer.enqueue({ queue, type: 't', payload: { i: next++ } });
          }),
        );
        const enqueueCpu = cpuUs() - cpu0;
        let ran = 0;
        const cs = consumers(env, 1, { queue, concurrency: 32, handlers: { t: async () => void ran++ } });
        const drained = await drain(cs, ITEMS, { done: () => ran, pollMs: 2 });
        await sdk?.shutdown();
        return {
          enqueueCpuUs: enqueueCpu / ITEMS,
          drainCpuUs: drained.nodeUs,
          drainPerS: ITEMS / drained.seconds,
          spans: sdk?.spans() ?? 0,
        };
      },
      12,
    ),
  line: (_, r) =>
    `enqueue ${fmt(r.enqueueCpuUs)} µs/item, drain ${fmt(r.drainCpuUs)} µs/item, ${fmt(r.drainPerS)} items/s, ` +
    `${r.spans} spans`,
  report: (of, runs) => [
    {
      title: `Tracing cost: ${ITEMS} items, ${runs} runs, medians (node CPU per item)`,
      headers: ['mode', 'enqueue µs', 'drain µs', 'total µs', 'drain items/s', 'spans'],
      rows: MODES.map((mode) => {
        const m = (f: (r: Result) => number): string => fmt(median(of(mode).map(f)));
        const total = m((x) => x.enqueueCpuUs + x.drainCpuUs);
        return [
          mode,
          m((x) => x.enqueueCpuUs),
          m((x) => x.drainCpuUs),
          total,
          m((x) => x.drainPerS),
          m((x) => x.spans),
        ];
      }),
      align: ['left', 'right', 'right', 'right', 'right', 'right'],
    },
  ],
});
