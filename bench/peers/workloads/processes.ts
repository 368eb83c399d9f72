/**
 * four-workers and sixteen-workers: jobs enqueued first by this run
 * process, then N worker processes (bench/peers/worker-process.ts), each
 * connected and ready, told to start at once; timed from that 'go' until
 * the system's own store counts every job completed. Peak RSS: the largest
 * of the worker processes.
 */
import { performance } from 'node:perf_hooks';
import { Effects, exactly } from '../effects.js';
import { drain, enqueueAll, finishPhase, STOPPED, type WorkloadFn } from '../phase.js';
import { RSS_METRIC, type Sizes } from '../protocol.js';
import type { BenchJob } from '../types.js';
import { stopWorkers, WorkerHandle } from '../worker-handle.js';

export type ProcessesShape = (s: Sizes) => { jobs: number; processes: number; concurrency: number };

export function workerProcesses(name: 'four-workers' | 'sixteen-workers', shape: ProcessesShape): WorkloadFn {
  return async (session, args, s, out) => {
    const { jobs: count, processes, concurrency } = shape(s);
    const a = await session.open(args.ns[0]!);
    await enqueueAll(
      a,
      Array.from({ length: count }, (_, n): BenchJob => ({ n })),
      s.bulkBatch,
    );
    const effects = new Effects(count);
    const workers = Array.from(
      { length: processes },
      () =>
        new WorkerHandle({ system: args.system, mode: args.mode, ns: args.ns[0]!, concurrency }, (ns) => {
          for (const n of ns) effects.see({ n });
        }),
    );
    try {
      await Promise.all(workers.map((w) => w.ready));
      const t0 = performance.now();
      for (const w of workers) w.go();
      const drained = await drain(a, effects, count);
      if (drained.ok) out.values.processing = (count / (drained.at - t0)) * 1000;
      const reports = await stopWorkers(workers);
      const rss = reports.map((r) => r.peakRssMb);
      out.workerPeakRssMb.push(...rss);
      out.values[`${RSS_METRIC} (max of ${processes} workers)`] = Math.max(...rss);
      out.warnings.push(...reports.flatMap((r) => r.warnings));
      await finishPhase(out, name, a, STOPPED, effects, { from: 0, to: count }, exactly(count), false, drained);
    } finally {
      await Promise.all(workers.map((w) => w.kill()));
    }
    await session.finish(a);
  };
}
