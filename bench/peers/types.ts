/**
 * The contract between the side-by-side benchmark (bench/compare.ts) and each system it measures: one adapter
 * per (system, mode) makes a fresh namespace, puts jobs in, and runs a worker that calls `onJob` once per job it
 * starts; the harness owns the workloads, timing and effect checks. The parent calls setup, connect, …, close,
 * teardown; a worker child process rebuilds the adapter from `ns` (plain JSON) and only connects.
 */

export const PG_URL = process.env.LANEWAKE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** `<prefix><ns.id>`, checked: the id becomes an SQL identifier or a key prefix. */
export function nsName(prefix: string, ns: Namespace): string {
  if (!/^[a-z0-9]{1,40}$/.test(ns.id)) throw new Error(`namespace id must be [a-z0-9]{1,40}: ${ns.id}`);
  return `${prefix}${ns.id}`;
}

/** What a job carries: the harness's own bookkeeping, nothing else. */
export interface BenchJob {
  /** Unique per run; the effect check counts these. */
  readonly n: number;
  /** Ordering key (workload "ordered"); absent = unordered. */
  readonly key?: string;
  /** Position within `key`, 0-based, in enqueue order. */
  readonly seq?: number;
  /** CLOCK_MONOTONIC µs just before the enqueue call (latency workloads; bench/peers/clock.ts). */
  readonly enqueuedAtUs?: number;
}

/** A fresh, private place for one run: database / schema / queue / key names derive from `id`. */
export interface Namespace {
  /** Short, [a-z0-9], unique per run. */
  readonly id: string;
}

export interface WorkerOptions {
  readonly concurrency: number;
  /** Called once each time a handler starts a job, before it returns. Must not throw. */
  readonly onJob: (job: BenchJob) => void;
}

export interface RunningWorker {
  /** Stops fetching and waits for in-flight handlers; releases the adapter's worker resources. */
  stop(): Promise<void>;
}

export interface PeerAdapter {
  /** Parent only: create the namespace (database, schema, migrations, queue). */
  setup(): Promise<void>;
  /** Any process: open clients against an existing namespace. */
  connect(): Promise<void>;
  /** Enqueue `jobs` in as few round trips as the system's batch API allows (the harness chooses the batch size). */
  enqueueBatch(jobs: readonly BenchJob[]): Promise<void>;
  /** Enqueue one job with the system's single-job API; resolves when it is committed. */
  enqueueOne(job: BenchJob): Promise<void>;
  /** Starts a worker in this process at the given concurrency; resolves when it is ready to take work. */
  startWorker(options: WorkerOptions): Promise<RunningWorker>;
  /** Jobs the system's own store counts completed (never the handler's count), in the enqueuing process. */
  completedCount(): Promise<number>;
  /** Closes what connect() opened. */
  close(): Promise<void>;
  /** Parent only: drop everything setup() made. Safe to call after a failed setup(). */
  teardown(): Promise<void>;
}

/**
 * 'latency': producer and worker in two processes (the deployed shape, the
 * headline); 'latency-in-process': the producer in the worker's own process.
 */
export type Workload =
  | 'bulk'
  | 'latency'
  | 'latency-in-process'
  | 'ordered'
  | 'four-workers'
  | 'sixteen-workers'
  | 'deep-lane';

export interface PeerFactory {
  /** e.g. 'lanewake', 'bullmq', 'graphile-worker', 'pg-boss'. */
  readonly system: string;
  /** e.g. 'wake', 'poll 5 s', 'defaults', 'local queue + batched completion'. */
  readonly mode: string;
  /** Workloads this (system, mode) runs; others are reported "n/a" with `notes[workload]`. */
  readonly workloads: readonly Workload[];
  /** Why a workload is n/a, or how the system provides it (e.g. "named queues" for ordered). */
  readonly notes: Partial<Record<Workload, string>>;
  /** Whether jobs with a `key` are run strictly one at a time per key, in enqueue order. */
  readonly ordersByKey: boolean;
  create(ns: Namespace): PeerAdapter;
}
