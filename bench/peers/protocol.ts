/**
 * What bench/compare.ts (the parent), bench/peers/run-one.ts (one run of one
 * workload, in a fresh process), its worker processes
 * (bench/peers/worker-process.ts) and the report share: the arguments and
 * result lines, workload sizes, and the metrics each workload reports.
 */
import type { Workload } from './types.js';

/** argv[2] of run-one.ts for one (system, mode, workload, run). */
export interface RunArgs {
  readonly system: string;
  readonly mode: string;
  readonly workload: Workload;
  readonly run: number;
  readonly scale: number;
  /** Namespace ids the run may use (deep-lane uses two: absent, present). */
  readonly ns: readonly string[];
}

/** argv[2] of worker-process.ts: one worker process of a run (latency, four-workers, sixteen-workers). */
export interface WorkerArgs {
  readonly system: string;
  readonly mode: string;
  readonly ns: string;
  readonly concurrency: number;
}

/** IPC: run process → worker process. 'go': start the worker; 'stop': stop it, report, exit. */
export type ToWorker = { type: 'go' } | { type: 'stop' };
/** IPC: worker process → run process. */
export type FromWorker =
  | { type: 'ready' }
  /** The worker is started and takes work (after 'go'). */
  | { type: 'working' }
  /** Jobs whose handler started, and for each its enqueue→start ms (null: the job carried no stamp). */
  | { type: 'starts'; ns: number[]; latencyMs: (number | null)[] }
  | { type: 'stopped'; peakRssMb: number; warnings: string[] }
  | { type: 'error'; message: string };

/** What the harness saw of one phase's jobs. */
export interface EffectCheck {
  readonly phase: string;
  /** Jobs that had to start exactly once. */
  readonly expected: number;
  readonly distinct: number;
  readonly missing: number;
  /** Starts beyond the first, over all jobs. */
  readonly duplicates: number;
  /** onJob calls with a job number the run never enqueued. */
  readonly unexpected: number;
  /** The system's own completed count (PeerAdapter.completedCount), read after the worker stopped. */
  readonly completed: number;
  /** What `completed` had to be, as text ("= 2000"). */
  readonly completedWant: string;
  /** Ordered workloads: out-of-order starts + duplicate starts + jobs never started, over all keys. */
  readonly orderViolations?: number;
}

/** The one JSON line run-one prints (kind 'result'). */
export interface RunResult {
  readonly kind: 'result';
  readonly system: string;
  readonly mode: string;
  readonly workload: Workload;
  readonly run: number;
  /** False: the run failed (lost / repeated a job, an error, a stall); its values are not used. */
  readonly ok: boolean;
  readonly failure?: string;
  /** Metric name (see METRICS) → value. */
  readonly values: Record<string, number>;
  readonly effects: readonly EffectCheck[];
  /** Peak RSS of each process that ran a worker, MB. */
  readonly workerPeakRssMb: readonly number[];
  /** What the system warned about in any process of the run (bench/peers/warnings.ts). */
  readonly warnings: readonly string[];
  /** Whether every namespace the run made was dropped by the child itself. */
  readonly tornDown: boolean;
  readonly durationMs: number;
}

/** A run's result record: who ran (from its args) and what came of it. */
export function runResult(
  args: RunArgs,
  outcome: Omit<RunResult, 'kind' | 'system' | 'mode' | 'workload' | 'run'>,
): RunResult {
  return { kind: 'result', system: args.system, mode: args.mode, workload: args.workload, run: args.run, ...outcome };
}

export interface Sizes {
  bulk: number;
  bulkBatch: number;
  latency: number;
  latencyRatePerS: number;
  ordered: number;
  orderedKeys: number;
  fourWorkers: number;
  workerProcesses: number;
  concurrency: number;
  /** The sixteen-workers workload: as four-workers with 16 processes of concurrency 8 (issue 16 §1). */
  sixteenWorkers: number;
  sixteenProcesses: number;
  sixteenConcurrency: number;
  deepLaneDepth: number;
  deepLaneJobs: number;
}

export function sizes(scale: number): Sizes {
  const n = (base: number, min = 1): number => Math.max(min, Math.round(base * scale));
  return {
    bulk: n(20_000),
    bulkBatch: 500,
    latency: n(1_000, 50),
    latencyRatePerS: 200,
    ordered: n(20_000, 1_000),
    orderedKeys: 1_000,
    fourWorkers: n(20_000, 4),
    workerProcesses: 4,
    concurrency: 32,
    sixteenWorkers: n(20_000, 16),
    sixteenProcesses: 16,
    sixteenConcurrency: 8,
    deepLaneDepth: n(100_000),
    deepLaneJobs: n(500, 50),
  };
}

export type Better = 'higher' | 'lower' | 'none';

export interface MetricDef {
  readonly workload: Workload;
  readonly metric: string;
  readonly unit: string;
  /** Which direction is better; 'none': no lanewake ratio. */
  readonly better: Better;
  /** Shown in the peak-RSS table instead of the main one. */
  readonly rss?: boolean;
}

const RSS = 'peak RSS';

/** Every row a workload produces, in table order. */
export const METRICS: readonly MetricDef[] = [
  { workload: 'bulk', metric: 'enqueue', unit: 'jobs/s', better: 'higher' },
  { workload: 'bulk', metric: 'processing', unit: 'jobs/s', better: 'higher' },
  { workload: 'bulk', metric: RSS, unit: 'MB', better: 'lower', rss: true },
  { workload: 'latency', metric: 'p50', unit: 'ms', better: 'lower' },
  { workload: 'latency', metric: 'p90', unit: 'ms', better: 'lower' },
  { workload: 'latency', metric: 'p99', unit: 'ms', better: 'lower' },
  { workload: 'latency', metric: 'max', unit: 'ms', better: 'lower' },
  { workload: 'latency', metric: `${RSS} (worker process)`, unit: 'MB', better: 'lower', rss: true },
  { workload: 'latency-in-process', metric: 'p50', unit: 'ms', better: 'lower' },
  { workload: 'latency-in-process', metric: 'p90', unit: 'ms', better: 'lower' },
  { workload: 'latency-in-process', metric: 'p99', unit: 'ms', better: 'lower' },
  { workload: 'latency-in-process', metric: 'max', unit: 'ms', better: 'lower' },
  { workload: 'latency-in-process', metric: RSS, unit: 'MB', better: 'lower', rss: true },
  { workload: 'ordered', metric: 'processing', unit: 'jobs/s', better: 'higher' },
  { workload: 'ordered', metric: 'order violations', unit: 'count', better: 'none' },
  { workload: 'ordered', metric: RSS, unit: 'MB', better: 'lower', rss: true },
  { workload: 'four-workers', metric: 'processing', unit: 'jobs/s', better: 'higher' },
  { workload: 'four-workers', metric: `${RSS} (max of 4 workers)`, unit: 'MB', better: 'lower', rss: true },
  { workload: 'sixteen-workers', metric: 'processing', unit: 'jobs/s', better: 'higher' },
  { workload: 'sixteen-workers', metric: `${RSS} (max of 16 workers)`, unit: 'MB', better: 'lower', rss: true },
  { workload: 'deep-lane', metric: 'p50, deep lane present', unit: 'ms', better: 'lower' },
  { workload: 'deep-lane', metric: 'p50, deep lane absent', unit: 'ms', better: 'lower' },
  { workload: 'deep-lane', metric: 'present / absent', unit: 'ratio', better: 'none' },
  { workload: 'deep-lane', metric: RSS, unit: 'MB', better: 'lower', rss: true },
];

export const RSS_METRIC = RSS;

/** The row name used in tables and latest.json: "latency p50", "bulk processing". */
export function rowName(m: { workload: string; metric: string }): string {
  return `${m.workload} ${m.metric}`;
}
