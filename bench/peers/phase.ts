/**
 * The steps every workload of a run is made of: put jobs in (all at once, or
 * arriving at a rate), wait until the system has drained them (every job
 * started, and the system's own store counts them completed: the end of
 * every throughput clock), and check the phase's effects once the worker
 * has stopped.
 */
import { performance } from 'node:perf_hooks';
import { sleep } from '../support.js';
import { monotonicUs } from './clock.js';
import { judge, STALL_MS, type CompletedWant, type Effects } from './effects.js';
import type { EffectCheck, RunArgs, Sizes } from './protocol.js';
import type { Session } from './session.js';
import type { BenchJob, PeerAdapter, RunningWorker } from './types.js';

/** What a run collects over its phases. */
export interface Outcome {
  values: Record<string, number>;
  effects: EffectCheck[];
  failures: string[];
  workerPeakRssMb: number[];
  /** Warnings reported by the run's worker processes (the run process adds its own at the end). */
  warnings: string[];
}

/** One workload's measurement: its phases, in the run's session, into `out`. */
export type WorkloadFn = (session: Session, args: RunArgs, s: Sizes, out: Outcome) => Promise<void>;

/** How often the store's completed count is read while the last completions are written. */
const COUNT_POLL_MS = 5;

function batches<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** Enqueues `jobs` with the system's batch API, `size` at a time; returns the time taken (ms). */
export async function enqueueAll(a: PeerAdapter, jobs: readonly BenchJob[], size: number): Promise<number> {
  const t0 = performance.now();
  for (const b of batches(jobs, size)) await a.enqueueBatch(b);
  return performance.now() - t0;
}

/**
 * Jobs arriving one at a time at `ratePerS` with the single-job API, open
 * loop on an absolute schedule (a slow enqueue does not delay the next),
 * each stamped with CLOCK_MONOTONIC just before its call. Returns the
 * enqueue errors.
 */
export async function arrivals(a: PeerAdapter, jobs: readonly BenchJob[], ratePerS: number): Promise<string[]> {
  const errors: string[] = [];
  const pending: Promise<void>[] = [];
  const interval = 1000 / ratePerS;
  const start = performance.now();
  for (let i = 0; i < jobs.length; i++) {
    const wait = start + i * interval - performance.now();
    if (wait > 0) await sleep(wait);
    const job = { ...jobs[i]!, enqueuedAtUs: monotonicUs() };
    pending.push(a.enqueueOne(job).catch((e: unknown) => void errors.push(e instanceof Error ? e.message : String(e))));
  }
  await Promise.all(pending);
  return errors;
}

/** A drain's end: when the store counted the jobs completed, or why the wait gave up. */
export type Drain = { ok: true; at: number } | { ok: false; why: string };

/**
 * Waits until every job `effects` waits for has started, then reads the
 * system's own completed count (every COUNT_POLL_MS; none can have
 * completed before the last start, so nothing is read earlier) until it
 * reaches `want`. `at` is performance.now() when that count came back: the
 * end of a throughput clock. `want` undefined: only the starts are waited for.
 */
export async function drain(a: PeerAdapter, effects: Effects, want: number | undefined): Promise<Drain> {
  if (!(await effects.wait())) return { ok: false, why: `stalled: no new job started for ${STALL_MS / 1000} s` };
  if (want === undefined) return { ok: true, at: performance.now() };
  let last = -1;
  let movedAt = performance.now();
  for (;;) {
    const n = await a.completedCount();
    const now = performance.now();
    if (n >= want) return { ok: true, at: now };
    if (n !== last) {
      last = n;
      movedAt = now;
    } else if (now - movedAt > STALL_MS) {
      return {
        ok: false,
        why:
          `stalled: every job started, but the store's completed count stayed at ${n} of ` +
          `${want} for ${STALL_MS / 1000} s`,
      };
    }
    await sleep(COUNT_POLL_MS);
  }
}

/**
 * Stops the worker, then checks the phase: every job of `range` started
 * exactly once, and the system's completed count (read now that every
 * completion is written) is what `completedWant` says.
 */
export async function finishPhase(
  out: Outcome,
  phase: string,
  a: PeerAdapter,
  worker: RunningWorker,
  effects: Effects,
  range: { from: number; to: number },
  completedWant: CompletedWant,
  ordered: boolean,
  drained: Drain,
): Promise<void> {
  await worker.stop();
  const completed = await a.completedCount();
  const want = completedWant(effects.distinct);
  const e = effects.check(phase, range, completed, want, ordered);
  out.effects.push(e);
  const why = judge(e, want);
  if (why) out.failures.push(why);
  if (!drained.ok) out.failures.push(`${phase}: ${drained.why}`);
}

/** A stand-in for workers that already stopped in their own processes. */
export const STOPPED: RunningWorker = { stop: async () => undefined };
