/**
 * The throughput workloads in one process: bulk (unordered) and ordered
 * (1,000 keys, per-key FIFO). Jobs are enqueued first; then one worker
 * drains them, timed from the start-worker call until the system's own
 * store counts every job completed (not until the last handler started:
 * lanewake, graphile-worker's batched completion and pg-boss free a slot
 * before the completion is written).
 *
 * four-workers and sixteen-workers: jobs enqueued first by this run process, then N worker processes
 * (bench/peers/worker-process.ts), each connected and ready, told to start at once; timed from that 'go' until
 * the store counts every job completed. Peak RSS: the largest of the worker processes.
 */
import { performance } from 'node:perf_hooks';
import { Effects, exactly } from '../effects.js';
import { drain, enqueueAll, finishPhase, STOPPED, type Outcome, type WorkloadFn } from '../phase.js';
import { RSS_METRIC, type Sizes } from '../protocol.js';
import type { BenchJob, PeerAdapter } from '../types.js';
import { stopWorkers, WorkerHandle } from '../worker-handle.js';

/** One worker at the harness's concurrency drains `count` enqueued jobs: processing jobs/s into `out`. */
async function drainTimed(
  a: PeerAdapter,
  phase: string,
  count: number,
  s: Sizes,
  out: Outcome,
  ordered: boolean,
): Promise<void> {
  const effects = new Effects(count);
  const t0 = performance.now();
  const worker = await a.startWorker({ concurrency: s.concurrency, onJob: (j) => effects.see(j) });
  const drained = await drain(a, effects, count);
  if (drained.ok) out.values.processing = (count / (drained.at - t0)) * 1000;
  await finishPhase(out, phase, a, worker, effects, { from: 0, to: count }, exactly(count), ordered, drained);
}

export const bulk: WorkloadFn = async (session, args, s, out) => {
  const a = await session.open(args.ns[0]!);
  const jobs = Array.from({ length: s.bulk }, (_, n): BenchJob => ({ n }));
  const enqueueMs = await enqueueAll(a, jobs, s.bulkBatch);
  out.values.enqueue = (s.bulk / enqueueMs) * 1000;
  await drainTimed(a, 'bulk', s.bulk, s, out, false);
  await session.finish(a);
};

export const ordered: WorkloadFn = async (session, args, s, out) => {
  const a = await session.open(args.ns[0]!);
  const jobs = Array.from(
    { length: s.ordered },
    (_, n): BenchJob => ({ n, key: `k${n % s.orderedKeys}`, seq: Math.floor(n / s.orderedKeys) }),
  );
  await enqueueAll(a, jobs, s.bulkBatch);
  await drainTimed(a, 'ordered', s.ordered, s, out, true);
  out.values['order violations'] = out.effects.at(-1)?.orderViolations ?? Number.NaN;
  await session.finish(a);
};

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
