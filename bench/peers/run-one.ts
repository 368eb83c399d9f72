/**
 * One run of one workload against one (system, mode), in a fresh process, so
 * nothing (state, caches, memory) leaks from one system to the next:
 *
 *   node --import tsx bench/peers/run-one.ts '{"role":"run","system":"lanewake","mode":"wake","workload":"bulk","run":1,"scale":0.1,"ns":["abc123"]}'
 *
 * It makes the namespace(s), runs the workload, checks every job's effect,
 * drops everything it made, and prints one JSON line (RunResult) to stdout.
 * With `"role":"worker"` it is one worker process of the four-workers
 * workload instead, driven over IPC by its run process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { onCleanup, percentile, sleep } from '../support.js';
import { findFactory } from './registry.js';
import {
  RSS_METRIC,
  sizes,
  type EffectCheck,
  type FromWorker,
  type RunArgs,
  type RunResult,
  type Sizes,
  type ToWorker,
  type WorkerArgs,
} from './protocol.js';
import type { BenchJob, PeerAdapter, PeerFactory, RunningWorker } from './types.js';

/** No new effect for this long while jobs are still missing ends the wait: the run fails. */
const STALL_MS = Number(process.env.LANEWAKE_BENCH_STALL_MS ?? 20_000);
/** After the worker reports ready, let it settle into idle before timed arrivals. */
const SETTLE_MS = 500;
const RUN_ONE = fileURLToPath(import.meta.url);

const wallNow = (): number => performance.timeOrigin + performance.now();
const maxRssMb = (): number => process.resourceUsage().maxRSS / 1024;

// ---------------------------------------------------------------------------
// Effects: which job numbers started, how often, and in what order per key.

class Effects {
  private readonly counts: Uint32Array;
  private unexpected = 0;
  private targetDistinct = 0;
  private distinctAll = 0;
  /** performance.now() of the start that completed the target, or of the last progress. */
  reachedAt = Number.NaN;
  lastProgressAt = performance.now();
  private resolveReached: (() => void) | undefined;
  readonly reached: Promise<void>;
  private readonly nextSeq = new Map<string, number>();
  private outOfOrder = 0;

  /**
   * `total` job numbers 0..total-1 may appear; the wait is over once every
   * number below `target` has started (target = total unless a phase only
   * waits for part of its jobs, as deep-lane does).
   */
  constructor(
    readonly total: number,
    readonly target = total,
  ) {
    this.counts = new Uint32Array(total);
    this.reached = new Promise((resolve) => (this.resolveReached = resolve));
    if (target === 0) this.markReached();
  }

  see(job: BenchJob): void {
    const n = job.n;
    if (!Number.isInteger(n) || n < 0 || n >= this.total) {
      this.unexpected++;
      return;
    }
    const c = this.counts[n]!;
    this.counts[n] = c + 1;
    // Order is judged on first starts; a repeated start is counted once, as a duplicate.
    if (c === 0 && job.key !== undefined && job.seq !== undefined) {
      const want = this.nextSeq.get(job.key) ?? 0;
      if (job.seq !== want) this.outOfOrder++;
      this.nextSeq.set(job.key, Math.max(want, job.seq + 1));
    }
    if (c === 0) {
      this.distinctAll++;
      this.lastProgressAt = performance.now();
      if (n < this.target && ++this.targetDistinct === this.target) this.markReached();
    }
  }

  private markReached(): void {
    this.reachedAt = performance.now();
    this.resolveReached?.();
  }

  get distinct(): number {
    return this.distinctAll;
  }

  get done(): boolean {
    return this.targetDistinct >= this.target;
  }

  /** Resolves true when the target is reached, false when nothing new started for STALL_MS. */
  async wait(): Promise<boolean> {
    if (this.done) return true;
    // The stall window starts no earlier than the wait (workers may take a while to come up).
    this.lastProgressAt = Math.max(this.lastProgressAt, performance.now());
    let timer: NodeJS.Timeout | undefined;
    const stalled = new Promise<false>((resolve) => {
      timer = setInterval(() => {
        if (performance.now() - this.lastProgressAt > STALL_MS) resolve(false);
      }, 250);
    });
    try {
      return await Promise.race([this.reached.then(() => true as const), stalled]);
    } finally {
      clearInterval(timer);
    }
  }

  /**
   * Counts over job numbers [from, to): each must have started exactly once
   * when `exactlyOnce`, else at most once.
   */
  check(phase: string, range: { from: number; to: number; exactlyOnce: boolean }, completed: number | undefined, completedWant: { min: number; max: number } | null, ordered: boolean): EffectCheck {
    let distinct = 0;
    let missing = 0;
    let duplicates = 0;
    for (let n = range.from; n < range.to; n++) {
      const c = this.counts[n]!;
      if (c > 0) distinct++;
      else if (range.exactlyOnce) missing++;
      if (c > 1) duplicates += c - 1;
    }
    const want = completedWant === null ? null : completedWant.min === completedWant.max ? `= ${completedWant.min}` : `≥ ${completedWant.min}, ≤ ${completedWant.max}`;
    return {
      phase,
      expected: range.exactlyOnce ? range.to - range.from : 0,
      distinct,
      missing,
      duplicates,
      unexpected: this.unexpected,
      completed: completed ?? null,
      completedWant: completed === undefined ? null : want,
      ...(ordered ? { orderViolations: this.outOfOrder + duplicates + missing } : {}),
    };
  }
}

/** Why a phase's effects fail the run, or undefined when they pass. */
function judge(e: EffectCheck, completedWant: { min: number; max: number } | null): string | undefined {
  const problems: string[] = [];
  if (e.missing > 0) problems.push(`${e.missing} of ${e.expected} jobs never started`);
  if (e.duplicates > 0) problems.push(`${e.duplicates} duplicate starts`);
  if (e.unexpected > 0) problems.push(`${e.unexpected} starts of jobs never enqueued`);
  if (e.completed !== null && completedWant !== null && (e.completed < completedWant.min || e.completed > completedWant.max)) {
    problems.push(`the system counts ${e.completed} completed, want ${e.completedWant ?? '?'}`);
  }
  return problems.length > 0 ? `${e.phase}: ${problems.join('; ')}` : undefined;
}

// ---------------------------------------------------------------------------
// Adapters made by this run: closed and torn down whatever happens.

class Session {
  private readonly opened: PeerAdapter[] = [];
  private readonly unregister = new Map<PeerAdapter, () => void>();
  tornDown = true;

  constructor(private readonly factory: PeerFactory) {}

  async open(nsId: string): Promise<PeerAdapter> {
    const a = this.factory.create({ id: nsId });
    this.opened.push(a);
    // Dropped at SIGINT / SIGTERM too (teardown is safe after a failed or partial setup).
    this.unregister.set(a, onCleanup(() => a.teardown()));
    await a.setup();
    await a.connect();
    return a;
  }

  /** Closes and tears down `a` now (a phase is over). */
  async finish(a: PeerAdapter): Promise<void> {
    const i = this.opened.indexOf(a);
    if (i >= 0) this.opened.splice(i, 1);
    this.unregister.get(a)?.();
    this.unregister.delete(a);
    await a.close().catch((e: unknown) => console.error('close failed:', e));
    await a.teardown().catch((e: unknown) => {
      this.tornDown = false;
      console.error('teardown failed:', e);
    });
  }

  async finishAll(): Promise<void> {
    for (const a of [...this.opened].reverse()) await this.finish(a);
  }
}

interface Outcome {
  values: Record<string, number>;
  effects: EffectCheck[];
  failures: string[];
  workerPeakRssMb: number[];
}

function batches<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

async function enqueueAll(a: PeerAdapter, jobs: readonly BenchJob[], size: number): Promise<number> {
  const t0 = performance.now();
  for (const b of batches(jobs, size)) await a.enqueueBatch(b);
  return performance.now() - t0;
}

/** Stops the worker and compares the system's completed count with `want`. */
async function finishPhase(
  out: Outcome,
  phase: string,
  a: PeerAdapter,
  worker: RunningWorker,
  effects: Effects,
  range: { from: number; to: number; exactlyOnce: boolean },
  completedWant: (distinctAll: number) => { min: number; max: number },
  ordered: boolean,
  reached: boolean,
): Promise<void> {
  await worker.stop();
  const completed = await a.completedCount();
  const want = completedWant(effects.distinct);
  const e = effects.check(phase, range, completed, want, ordered);
  out.effects.push(e);
  const why = judge(e, want);
  if (why) out.failures.push(why);
  else if (!reached) out.failures.push(`${phase}: stalled (no new job started for ${STALL_MS / 1000} s)`);
}

/** Jobs arriving one at a time at `ratePerS`, open loop on an absolute schedule; returns enqueue errors. */
async function arrivals(a: PeerAdapter, jobs: readonly BenchJob[], ratePerS: number): Promise<string[]> {
  const errors: string[] = [];
  const pending: Promise<void>[] = [];
  const interval = 1000 / ratePerS;
  const start = performance.now();
  for (let i = 0; i < jobs.length; i++) {
    const wait = start + i * interval - performance.now();
    if (wait > 0) await sleep(wait);
    const job = { ...jobs[i]!, t: wallNow() };
    pending.push(a.enqueueOne(job).catch((e: unknown) => void errors.push(e instanceof Error ? e.message : String(e))));
  }
  await Promise.all(pending);
  return errors;
}

// ---------------------------------------------------------------------------
// Workloads.

type WorkloadFn = (session: Session, args: RunArgs, s: Sizes, out: Outcome) => Promise<void>;

const exactly = (n: number) => () => ({ min: n, max: n });

const bulk: WorkloadFn = async (session, args, s, out) => {
  const a = await session.open(args.ns[0]!);
  const jobs = Array.from({ length: s.bulk }, (_, n): BenchJob => ({ n }));
  const enqueueMs = await enqueueAll(a, jobs, s.bulkBatch);
  out.values.enqueue = (s.bulk / enqueueMs) * 1000;
  const effects = new Effects(s.bulk);
  const t0 = performance.now();
  const worker = await a.startWorker({ concurrency: s.concurrency, onJob: (j) => effects.see(j) });
  const reached = await effects.wait();
  if (reached) out.values.processing = (s.bulk / (effects.reachedAt - t0)) * 1000;
  await finishPhase(out, 'bulk', a, worker, effects, { from: 0, to: s.bulk, exactlyOnce: true }, exactly(s.bulk), false, reached);
  await session.finish(a);
};

/** Idle worker, `jobs` arriving at the given rate; returns enqueue→start latencies (ms). */
async function latencyPhase(
  a: PeerAdapter,
  s: Sizes,
  out: Outcome,
  phase: string,
  jobs: readonly BenchJob[],
  effects: Effects,
  range: { from: number; to: number },
  completedWant: (distinctAll: number) => { min: number; max: number },
  ordered: boolean,
): Promise<number[]> {
  const latencies: number[] = [];
  const worker = await a.startWorker({
    concurrency: s.concurrency,
    onJob: (j) => {
      const now = wallNow();
      if (j.t !== undefined && j.n >= range.from && j.n < range.to) latencies.push(now - j.t);
      effects.see(j);
    },
  });
  await sleep(SETTLE_MS);
  const errors = await arrivals(a, jobs, s.latencyRatePerS);
  if (errors.length > 0) out.failures.push(`${phase}: ${errors.length} enqueues failed: ${errors[0]}`);
  const reached = await effects.wait();
  await finishPhase(out, phase, a, worker, effects, { ...range, exactlyOnce: true }, completedWant, ordered, reached);
  return latencies;
}

const latency: WorkloadFn = async (session, args, s, out) => {
  const a = await session.open(args.ns[0]!);
  const jobs = Array.from({ length: s.latency }, (_, n): BenchJob => ({ n }));
  const effects = new Effects(s.latency);
  const lat = await latencyPhase(a, s, out, 'latency', jobs, effects, { from: 0, to: s.latency }, exactly(s.latency), false);
  out.values.p50 = percentile(lat, 50);
  out.values.p90 = percentile(lat, 90);
  out.values.p99 = percentile(lat, 99);
  out.values.max = Math.max(...lat);
  await session.finish(a);
};

const ordered: WorkloadFn = async (session, args, s, out) => {
  const a = await session.open(args.ns[0]!);
  const jobs = Array.from({ length: s.ordered }, (_, n): BenchJob => ({ n, key: `k${n % s.orderedKeys}`, seq: Math.floor(n / s.orderedKeys) }));
  await enqueueAll(a, jobs, s.bulkBatch);
  const effects = new Effects(s.ordered);
  const t0 = performance.now();
  const worker = await a.startWorker({ concurrency: s.concurrency, onJob: (j) => effects.see(j) });
  const reached = await effects.wait();
  if (reached) out.values.processing = (s.ordered / (effects.reachedAt - t0)) * 1000;
  await finishPhase(out, 'ordered', a, worker, effects, { from: 0, to: s.ordered, exactlyOnce: true }, exactly(s.ordered), true, reached);
  out.values['order violations'] = out.effects.at(-1)?.orderViolations ?? Number.NaN;
  await session.finish(a);
};

const deepLane: WorkloadFn = async (session, args, s, out) => {
  const m = s.deepLaneJobs;
  const fresh = Array.from({ length: m }, (_, n): BenchJob => ({ n, key: `f${n}`, seq: 0 }));
  // Absent: fresh keys only.
  {
    const a = await session.open(args.ns[0]!);
    const effects = new Effects(m);
    const lat = await latencyPhase(a, s, out, 'deep-lane absent', fresh, effects, { from: 0, to: m }, exactly(m), true);
    out.values['p50, deep lane absent'] = percentile(lat, 50);
    await session.finish(a);
  }
  // Present: one key holding `deepLaneDepth` queued jobs before the worker starts.
  {
    const a = await session.open(args.ns[1]!);
    const deep = Array.from({ length: s.deepLaneDepth }, (_, i): BenchJob => ({ n: m + i, key: 'deep', seq: i }));
    await enqueueAll(a, deep, s.bulkBatch);
    // Wait for the fresh jobs only; the deep lane runs one at a time meanwhile.
    const effects = new Effects(m + s.deepLaneDepth, m);
    const lat = await latencyPhase(a, s, out, 'deep-lane present', fresh, effects, { from: 0, to: m }, (seen) => ({ min: m, max: seen }), true);
    out.values['p50, deep lane present'] = percentile(lat, 50);
    await session.finish(a);
  }
  out.values['present / absent'] = (out.values['p50, deep lane present'] ?? Number.NaN) / (out.values['p50, deep lane absent'] ?? Number.NaN);
};

// Four worker processes.

interface WorkerHandle {
  child: ChildProcess;
  ready: Promise<void>;
  stopped: Promise<number>;
  exited: Promise<number | null>;
}

function spawnWorker(args: WorkerArgs, onEffects: (ns: readonly number[]) => void): WorkerHandle {
  const child = spawn(process.execPath, ['--import', 'tsx', RUN_ONE, JSON.stringify(args)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let readyResolve: () => void = () => undefined;
  let readyReject: (e: Error) => void = () => undefined;
  let stoppedResolve: (rss: number) => void = () => undefined;
  let stoppedReject: (e: Error) => void = () => undefined;
  const ready = new Promise<void>((res, rej) => ((readyResolve = res), (readyReject = rej)));
  const stopped = new Promise<number>((res, rej) => ((stoppedResolve = res), (stoppedReject = rej)));
  ready.catch(() => undefined);
  stopped.catch(() => undefined);
  child.on('message', (raw) => {
    const msg = raw as FromWorker;
    if (msg.type === 'ready') readyResolve();
    else if (msg.type === 'effects') onEffects(msg.ns);
    else if (msg.type === 'stopped') stoppedResolve(msg.peakRssMb);
    else if (msg.type === 'error') {
      const e = new Error(`worker ${child.pid}: ${msg.message}`);
      readyReject(e);
      stoppedReject(e);
    }
  });
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => {
      const e = new Error(`worker ${child.pid} exited ${code}`);
      readyReject(e);
      stoppedReject(e);
      resolve(code);
    });
  });
  return { child, ready, stopped, exited };
}

const send = (child: ChildProcess, msg: ToWorker): void => {
  if (child.connected) child.send(msg);
};

/** N worker processes of one system, each started at once on pre-enqueued jobs: four-workers and sixteen-workers. */
function workersWorkload(name: 'four-workers' | 'sixteen-workers', shape: (s: Sizes) => { jobs: number; processes: number; concurrency: number }): WorkloadFn {
  return async (session, args, s, out) => {
    const { jobs: count, processes, concurrency } = shape(s);
    const a = await session.open(args.ns[0]!);
    const jobs = Array.from({ length: count }, (_, n): BenchJob => ({ n }));
    await enqueueAll(a, jobs, s.bulkBatch);
    const effects = new Effects(count);
    const workers = Array.from({ length: processes }, () =>
      spawnWorker({ role: 'worker', system: args.system, mode: args.mode, ns: args.ns[0]!, concurrency }, (ns) => {
        for (const n of ns) effects.see({ n });
      }),
    );
    try {
      await Promise.all(workers.map((w) => w.ready));
      const t0 = performance.now();
      for (const w of workers) send(w.child, { type: 'go' });
      const reached = await effects.wait();
      if (reached) out.values.processing = (count / (effects.reachedAt - t0)) * 1000;
      for (const w of workers) send(w.child, { type: 'stop' });
      const rss = await Promise.all(workers.map((w) => w.stopped));
      out.workerPeakRssMb.push(...rss);
      out.values[`${RSS_METRIC} (max of ${processes} workers)`] = Math.max(...rss);
      await Promise.all(workers.map((w) => w.exited));
      // The workers have stopped: this worker stand-in only reads the count.
      const stopped: RunningWorker = { stop: async () => undefined };
      await finishPhase(out, name, a, stopped, effects, { from: 0, to: count, exactlyOnce: true }, exactly(count), false, reached);
    } finally {
      for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGTERM');
      await Promise.all(workers.map((w) => w.exited));
    }
    await session.finish(a);
  };
}

const WORKLOADS: Record<RunArgs['workload'], WorkloadFn> = {
  bulk,
  latency,
  ordered,
  'four-workers': workersWorkload('four-workers', (s) => ({ jobs: s.fourWorkers, processes: s.workerProcesses, concurrency: s.concurrency })),
  'sixteen-workers': workersWorkload('sixteen-workers', (s) => ({ jobs: s.sixteenWorkers, processes: s.sixteenProcesses, concurrency: s.sixteenConcurrency })),
  'deep-lane': deepLane,
};

// ---------------------------------------------------------------------------
// Entry points.

async function runMain(args: RunArgs): Promise<RunResult> {
  const started = performance.now();
  const factory = await findFactory(args.system, args.mode);
  const session = new Session(factory);
  const out: Outcome = { values: {}, effects: [], failures: [], workerPeakRssMb: [] };
  try {
    await WORKLOADS[args.workload](session, args, sizes(args.scale), out);
  } catch (error) {
    out.failures.push(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  } finally {
    await session.finishAll();
  }
  if (args.workload !== 'four-workers' && args.workload !== 'sixteen-workers') {
    out.workerPeakRssMb.push(maxRssMb());
    out.values[RSS_METRIC] = maxRssMb();
  }
  const ok = out.failures.length === 0;
  return {
    kind: 'result',
    system: args.system,
    mode: args.mode,
    workload: args.workload,
    run: args.run,
    ok,
    ...(ok ? {} : { failure: out.failures.join(' | ') }),
    values: out.values,
    effects: out.effects,
    workerPeakRssMb: out.workerPeakRssMb,
    tornDown: session.tornDown,
    durationMs: performance.now() - started,
  };
}

/** A four-workers worker: connect, say ready, start on 'go', stream job numbers back, stop on 'stop'. */
async function workerMain(args: WorkerArgs): Promise<void> {
  const toParent = (m: FromWorker): void => {
    process.send?.(m);
  };
  // The run process went away (killed, interrupted): nothing left to work for.
  let finishing = false;
  process.on('disconnect', () => {
    if (!finishing) process.exit(1);
  });
  try {
    const factory = await findFactory(args.system, args.mode);
    const adapter = factory.create({ id: args.ns });
    await adapter.connect();
    let buffer: number[] = [];
    let flushTimer: NodeJS.Timeout | undefined;
    const flush = (): void => {
      flushTimer = undefined;
      if (buffer.length === 0) return;
      toParent({ type: 'effects', ns: buffer });
      buffer = [];
    };
    const gate = new Promise<void>((resolve) => {
      process.on('message', (m: unknown) => {
        if ((m as ToWorker).type === 'go') resolve();
      });
    });
    const stopRequested = new Promise<void>((resolve) => {
      process.on('message', (m: unknown) => {
        if ((m as ToWorker).type === 'stop') resolve();
      });
    });
    toParent({ type: 'ready' });
    await gate;
    const worker = await adapter.startWorker({
      concurrency: args.concurrency,
      onJob: (j) => {
        buffer.push(j.n);
        if (buffer.length >= 512) flush();
        else flushTimer ??= setTimeout(flush, 5);
      },
    });
    await stopRequested;
    await worker.stop();
    if (flushTimer) clearTimeout(flushTimer);
    flush();
    await adapter.close();
    toParent({ type: 'stopped', peakRssMb: maxRssMb() });
  } catch (error) {
    toParent({ type: 'error', message: error instanceof Error ? error.message : String(error) });
  }
  finishing = true;
  process.disconnect?.();
}

function write(line: string): Promise<void> {
  return new Promise((resolve) => process.stdout.write(`${line}\n`, () => resolve()));
}

async function main(): Promise<void> {
  const raw = process.argv[2];
  if (!raw) throw new Error('usage: run-one.ts <json args>');
  const args = JSON.parse(raw) as RunArgs | WorkerArgs;
  if (args.role === 'worker') {
    await workerMain(args);
    process.exit(0);
  }
  const result = await runMain(args);
  await write(JSON.stringify(result));
  // Some clients keep sockets or timers alive after close(); the run is over.
  process.exit(0);
}

main().catch(async (error: unknown) => {
  console.error(error);
  process.exit(1);
});
