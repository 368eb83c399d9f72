/**
 * Tracing cost (docs/operations/observing.md, Tracing): the same small engine workload
 * — single enqueues through the producer, then a consumer at concurrency 32
 * draining them with a no-op handler, with Redis wake-ups — in three modes,
 * interleaved run by run so the machine's noise falls on all alike:
 *
 *   absent    @opentelemetry/api treated as not installed (the tracing code's one check)
 *   api       the API loaded, no SDK registered (no-op spans, nothing stored)
 *   sdk       a BasicTracerProvider (BatchSpanProcessor to an exporter that drops
 *             the spans) and a MeterProvider registered: every span and histogram
 *             point made and exported
 *
 *   npm run bench:tracing
 *   npm run bench:tracing -- --runs 5 --items 4000
 *
 * Reported: the median of the runs of node's CPU per item (enqueue and
 * drain), which moves less with noise than wall time, and items/s drained.
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
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import { parseArgs } from 'node:util';
import { Consumer } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { setOtelForTesting } from '../src/tracing/otel.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { createBenchDatabase, fmt, median, printTable, runBenchmark } from './support.js';

const { values } = parseArgs({
  options: { runs: { type: 'string', default: '3' }, items: { type: 'string', default: '3000' } },
});
const RUNS = Number(values.runs);
const ITEMS = Number(values.items);
const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const log = createLogger('bench', 'warn');

type Mode = 'absent' | 'api' | 'sdk';
const MODES: readonly Mode[] = ['absent', 'api', 'sdk'];

/** Spans made and exported, then dropped: the SDK's cost without an exporter's I/O. */
class DroppingExporter implements SpanExporter {
  exported = 0;
  export(spans: ReadableSpan[], done: (result: { code: number }) => void): void {
    this.exported += spans.length;
    done({ code: 0 });
  }
  async shutdown(): Promise<void> {}
}

interface Sdk {
  exporter: DroppingExporter;
  shutdown: () => Promise<void>;
}

function useMode(mode: Mode): Sdk | undefined {
  trace.disable();
  metrics.disable();
  if (mode === 'absent') {
    setOtelForTesting(null);
    return undefined;
  }
  setOtelForTesting(otelApi);
  if (mode === 'api') return undefined;
  const exporter = new DroppingExporter();
  const tracerProvider = new BasicTracerProvider({
    spanProcessors: [new BatchSpanProcessor(exporter, { maxQueueSize: 65_536 })],
  });
  const meterProvider = new MeterProvider({
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
        exportIntervalMillis: 3_600_000,
      }),
    ],
  });
  trace.setGlobalTracerProvider(tracerProvider);
  metrics.setGlobalMeterProvider(meterProvider);
  return {
    exporter,
    shutdown: async () => {
      await tracerProvider.shutdown();
      await meterProvider.shutdown();
    },
  };
}

interface RunResult {
  enqueueCpuUs: number;
  drainCpuUs: number;
  drainPerS: number;
  spans: number;
}

function cpuUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

async function runOnce(mode: Mode): Promise<RunResult> {
  const db = await createBenchDatabase('lwtr');
  const ledger = new Ledger({ url: db.url, poolSize: 12 });
  const wake = new WakeChannel({ redis: REDIS_URL, keyPrefix: `lwbench:tr:${Date.now()}:`, logger: log });
  const sdk = useMode(mode);
  try {
    await ledger.migrate();
    const queue = 'bench';
    const producer = new Producer({ ledger, wake });
    // Enqueue: 50 callers at once, each awaiting its own single enqueues (no application span: lanewake's spans alone).
    let next = 0;
    const cpu0 = cpuUs();
    await Promise.all(
      Array.from({ length: 50 }, async () => {
        while (next < ITEMS) await producer.enqueue({ queue, type: 't', payload: { i: next++ } });
      }),
    );
    const enqueueCpu = cpuUs() - cpu0;
    let done = 0;
    const consumer = new Consumer({
      ledger,
      wake,
      queue,
      concurrency: 32,
      logger: log,
      handlers: { t: async () => void done++ },
    });
    const cpu1 = cpuUs();
    const t1 = performance.now();
    await consumer.start();
    while (done < ITEMS) await new Promise((r) => setTimeout(r, 2));
    const drainMs = performance.now() - t1;
    const drainCpu = cpuUs() - cpu1;
    await consumer.stop();
    await sdk?.shutdown();
    return {
      enqueueCpuUs: enqueueCpu / ITEMS,
      drainCpuUs: drainCpu / ITEMS,
      drainPerS: (ITEMS / drainMs) * 1000,
      spans: sdk?.exporter.exported ?? 0,
    };
  } finally {
    await wake.dropKeys();
    await wake.close();
    await ledger.close();
    await db.drop();
  }
}

async function main(): Promise<void> {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const results = new Map<Mode, RunResult[]>(MODES.map((m) => [m, []]));
  for (let r = 0; r < RUNS; r++) {
    for (const mode of MODES) {
      const out = await runOnce(mode);
      results.get(mode)!.push(out);
      console.error(
        `run ${r + 1}/${RUNS} ${mode}: enqueue ${fmt(out.enqueueCpuUs)} µs/item, drain ` +
          `${fmt(out.drainCpuUs)} µs/item, ${fmt(out.drainPerS)} items/s, ${out.spans} ` +
          `spans`,
      );
    }
  }
  const rows = MODES.map((mode) => {
    const rs = results.get(mode)!;
    return [
      mode,
      fmt(median(rs.map((x) => x.enqueueCpuUs))),
      fmt(median(rs.map((x) => x.drainCpuUs))),
      fmt(median(rs.map((x) => x.enqueueCpuUs + x.drainCpuUs))),
      fmt(median(rs.map((x) => x.drainPerS))),
      fmt(median(rs.map((x) => x.spans))),
    ];
  });
  printTable(
    `Tracing cost: ${ITEMS} items, ${RUNS} runs, medians (node CPU per item)`,
    ['mode', 'enqueue µs', 'drain µs', 'total µs', 'drain items/s', 'spans'],
    rows,
    ['left', 'right', 'right', 'right', 'right', 'right'],
  );
}

runBenchmark(main);
