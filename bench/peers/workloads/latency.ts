/**
 * Enqueue→start latency into idle workers: jobs arrive one at a time at
 * the harness's rate (open loop), each stamped on CLOCK_MONOTONIC just
 * before its enqueue call; the handler takes its start on the same clock.
 *
 * - latency: the producer (this run process) and the worker (a process of
 *   its own) are two processes, as a web process and a worker process are
 *   when deployed. The headline row.
 * - latency-in-process: the worker runs in the producer's own process (for
 *   lanewake's 'wake, in-process handover' mode that is the shortcut it
 *   takes when both share a wake channel).
 *
 * - deep-lane: does one long lane slow everyone else down? latency-in-process on fresh keys, once with nothing
 *   else queued (absent), once with one key holding `deepLaneDepth` jobs processed one at a time meanwhile
 *   (present). Systems with per-key order only.
 *
 * Either way the phase ends only when the system's store counts every job
 * completed, and the worker stopped.
 */
import { percentile, sleep } from '../../support.js';
import { msSince } from '../clock.js';
import { Effects, everyStarted, exactly, type CompletedWant } from '../effects.js';
import { arrivals, drain, enqueueAll, finishPhase, STOPPED, type Outcome, type WorkloadFn } from '../phase.js';
import { RSS_METRIC, type Sizes } from '../protocol.js';
import type { BenchJob, PeerAdapter } from '../types.js';
import { stopWorkers, WorkerHandle } from '../worker-handle.js';

/** After the worker is started, let it settle into idle before the arrivals. */
const SETTLE_MS = 500;

function recordLatencies(out: Outcome, latencies: readonly number[]): void {
  out.values.p50 = percentile(latencies, 50);
  out.values.p90 = percentile(latencies, 90);
  out.values.p99 = percentile(latencies, 99);
  out.values.max = Math.max(...latencies);
}

export interface InProcessPhase {
  readonly phase: string;
  /** Arrive in this order; their numbers are 0..jobs.length-1. */
  readonly jobs: readonly BenchJob[];
  readonly effects: Effects;
  /** Wait for the store to count this many completed before stopping (undefined: stop once the jobs started). */
  readonly drainTo: number | undefined;
  readonly completedWant: CompletedWant;
  readonly ordered: boolean;
}

/**
 * An idle worker in this process, `p.jobs` arriving at the harness's rate; returns their enqueue→start latencies (ms).
 */
export async function inProcessLatency(a: PeerAdapter, s: Sizes, out: Outcome, p: InProcessPhase): Promise<number[]> {
  const latencies: number[] = [];
  const count = p.jobs.length;
  const worker = await a.startWorker({
    concurrency: s.concurrency,
    onJob: (j) => {
      if (j.enqueuedAtUs !== undefined && j.n < count) latencies.push(msSince(j.enqueuedAtUs));
      p.effects.see(j);
    },
  });
  await sleep(SETTLE_MS);
  const errors = await arrivals(a, p.jobs, s.latencyRatePerS);
  if (errors.length > 0) out.failures.push(`${p.phase}: ${errors.length} enqueues failed: ${errors[0]}`);
  const drained = await drain(a, p.effects, p.drainTo);
  await finishPhase(out, p.phase, a, worker, p.effects, { from: 0, to: count }, p.completedWant, p.ordered, drained);
  return latencies;
}

export const latencyInProcess: WorkloadFn = async (session, args, s, out) => {
  const a = await session.open(args.ns[0]!);
  const jobs = Array.from({ length: s.latency }, (_, n): BenchJob => ({ n }));
  const effects = new Effects(s.latency);
  const phase = {
    phase: 'latency-in-process',
    jobs,
    effects,
    drainTo: s.latency,
    completedWant: exactly(s.latency),
    ordered: false,
  };
  recordLatencies(out, await inProcessLatency(a, s, out, phase));
  await session.finish(a);
};

export const latencyTwoProcesses: WorkloadFn = async (session, args, s, out) => {
  const a = await session.open(args.ns[0]!);
  const jobs = Array.from({ length: s.latency }, (_, n): BenchJob => ({ n }));
  const effects = new Effects(s.latency);
  const latencies: number[] = [];
  const worker = new WorkerHandle(
    { system: args.system, mode: args.mode, ns: args.ns[0]!, concurrency: s.concurrency },
    (ns, latencyMs) => {
      ns.forEach((n, i) => {
        const ms = latencyMs[i];
        if (ms !== null && ms !== undefined) latencies.push(ms);
        effects.see({ n });
      });
    },
  );
  try {
    await worker.ready;
    worker.go();
    await worker.working;
    await sleep(SETTLE_MS);
    const errors = await arrivals(a, jobs, s.latencyRatePerS);
    if (errors.length > 0) out.failures.push(`latency: ${errors.length} enqueues failed: ${errors[0]}`);
    const drained = await drain(a, effects, s.latency);
    const [report] = await stopWorkers([worker]);
    if (report) {
      out.workerPeakRssMb.push(report.peakRssMb);
      out.values[`${RSS_METRIC} (worker process)`] = report.peakRssMb;
      out.warnings.push(...report.warnings);
    }
    await finishPhase(
      out,
      'latency',
      a,
      STOPPED,
      effects,
      { from: 0, to: s.latency },
      exactly(s.latency),
      false,
      drained,
    );
  } finally {
    await worker.kill();
  }
  recordLatencies(out, latencies);
  await session.finish(a);
};

export const deepLane: WorkloadFn = async (session, args, s, out) => {
  const m = s.deepLaneJobs;
  const fresh = Array.from({ length: m }, (_, n): BenchJob => ({ n, key: `f${n}`, seq: 0 }));
  {
    const a = await session.open(args.ns[0]!);
    const phase = {
      phase: 'deep-lane absent',
      jobs: fresh,
      effects: new Effects(m),
      drainTo: m,
      completedWant: exactly(m),
      ordered: true,
    };
    out.values['p50, deep lane absent'] = percentile(await inProcessLatency(a, s, out, phase), 50);
    await session.finish(a);
  }
  {
    const a = await session.open(args.ns[1]!);
    const deep = Array.from({ length: s.deepLaneDepth }, (_, i): BenchJob => ({ n: m + i, key: 'deep', seq: i }));
    await enqueueAll(a, deep, s.bulkBatch);
    // Waits for the fresh jobs only; once the worker stopped, every job that started (fresh or deep) must be counted
    // completed.
    const phase = {
      phase: 'deep-lane present',
      jobs: fresh,
      effects: new Effects(m + s.deepLaneDepth, m),
      drainTo: undefined,
      completedWant: everyStarted,
      ordered: true,
    };
    out.values['p50, deep lane present'] = percentile(await inProcessLatency(a, s, out, phase), 50);
    await session.finish(a);
  }
  out.values['present / absent'] =
    (out.values['p50, deep lane present'] ?? Number.NaN) / (out.values['p50, deep lane absent'] ?? Number.NaN);
};
