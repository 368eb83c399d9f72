/**
 * What the jobs of one latency band waited on (bench/steady.ts): of the jobs
 * whose enqueue→start falls between two percentiles, how each reached its
 * consumer, and how their time splits into the producer's enqueue call
 * (batching, the INSERT's commit, the wake-up's publish) and what came after
 * it (a handoff, a wake-up read and a claim round, a sweep).
 */
import { median, percentile } from './support.js';

export interface JobPath {
  /** The job's number: its index into the producer's enqueue times. */
  k: number;
  /** enqueue→start, µs. */
  us: number;
  path: string;
}

export interface Band {
  label: string;
  jobs: number;
  byPath: Record<string, number>;
  /** Medians over the band, ms. */
  enqueueMs: number;
  afterEnqueueMs: number;
}

export function band(
  label: string,
  jobs: readonly JobPath[],
  enqueueUs: readonly number[],
  fromPct: number,
  toPct: number,
): Band {
  const all = jobs.map((j) => j.us);
  const lo = fromPct === 0 ? -Infinity : percentile(all, fromPct);
  const hi = percentile(all, toPct);
  const inBand = jobs.filter((j) => j.us > lo && j.us <= hi);
  const byPath: Record<string, number> = {};
  for (const j of inBand) byPath[j.path] = (byPath[j.path] ?? 0) + 1;
  const enq = inBand.map((j) => enqueueUs[j.k] ?? NaN).filter((v) => Number.isFinite(v));
  const after = inBand.map((j) => j.us - (enqueueUs[j.k] ?? NaN)).filter((v) => Number.isFinite(v));
  return {
    label,
    jobs: inBand.length,
    byPath,
    enqueueMs: enq.length > 0 ? median(enq) / 1000 : NaN,
    afterEnqueueMs: after.length > 0 ? median(after) / 1000 : NaN,
  };
}

export function formatBand(b: Band): string {
  const paths = Object.entries(b.byPath)
    .sort((x, y) => y[1] - x[1])
    .map(([p, n]) => `${n} ${p}`)
    .join(', ');
  return `${b.label}: ${b.jobs} jobs, ${paths}; median enqueue call ${b.enqueueMs.toFixed(2)} ms, then ${b.afterEnqueueMs.toFixed(2)} ms to start`;
}
