/**
 * The effect check of one phase of a run: which job numbers a handler
 * started, how often, and in what order per key; and the verdict on those
 * starts together with the system's own completed count.
 */
import { performance } from 'node:perf_hooks';
import type { EffectCheck } from './protocol.js';
import type { BenchJob } from './types.js';

/** No new start (or completion) for this long while some are missing ends the wait: the run fails. */
export const STALL_MS = Number(process.env.LANEWAKE_BENCH_STALL_MS ?? 20_000);

/** What the system's completed count must be: exactly this many. */
export type CompletedWant = (distinctStarted: number) => number;

export const exactly =
  (n: number): CompletedWant =>
  () =>
    n;

/** Every job that started must be counted completed once (a phase that stops with jobs still queued). */
export const everyStarted: CompletedWant = (distinctStarted) => distinctStarted;

export class Effects {
  private readonly counts: Uint32Array;
  private unexpected = 0;
  private targetDistinct = 0;
  private distinctAll = 0;
  private lastProgressAt = performance.now();
  private resolveReached: (() => void) | undefined;
  private readonly reached: Promise<void>;
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
    if (target === 0) this.resolveReached?.();
  }

  see(job: Pick<BenchJob, 'n' | 'key' | 'seq'>): void {
    const n = job.n;
    if (!Number.isInteger(n) || n < 0 || n >= this.total) {
      this.unexpected++;
      return;
    }
    const c = this.counts[n]!;
    this.counts[n] = c + 1;
    if (c > 0) return;
    // Order is judged on first starts; a repeated start is counted once, as a duplicate.
    if (job.key !== undefined && job.seq !== undefined) {
      const want = this.nextSeq.get(job.key) ?? 0;
      if (job.seq !== want) this.outOfOrder++;
      this.nextSeq.set(job.key, Math.max(want, job.seq + 1));
    }
    this.distinctAll++;
    this.lastProgressAt = performance.now();
    if (n < this.target && ++this.targetDistinct === this.target) this.resolveReached?.();
  }

  get distinct(): number {
    return this.distinctAll;
  }

  /** Resolves true when the target has started, false when nothing new started for STALL_MS. */
  async wait(): Promise<boolean> {
    if (this.targetDistinct >= this.target) return true;
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

  /** The starts of job numbers [from, to), each of which must have started exactly once, with the system's count. */
  check(
    phase: string,
    range: { from: number; to: number },
    completed: number,
    want: number,
    ordered: boolean,
  ): EffectCheck {
    let distinct = 0;
    let missing = 0;
    let duplicates = 0;
    for (let n = range.from; n < range.to; n++) {
      const c = this.counts[n]!;
      if (c > 0) distinct++;
      else missing++;
    }
    for (const c of this.counts) if (c > 1) duplicates += c - 1;
    return {
      phase,
      expected: range.to - range.from,
      distinct,
      missing,
      duplicates,
      unexpected: this.unexpected,
      completed,
      completedWant: `= ${want}`,
      ...(ordered ? { orderViolations: this.outOfOrder + duplicates + missing } : {}),
    };
  }
}

/** Why a phase's effects fail the run, or undefined when they pass. */
export function judge(e: EffectCheck, want: number): string | undefined {
  const problems: string[] = [];
  if (e.missing > 0) problems.push(`${e.missing} of ${e.expected} jobs never started`);
  if (e.duplicates > 0) problems.push(`${e.duplicates} duplicate starts`);
  if (e.unexpected > 0) problems.push(`${e.unexpected} starts of jobs never enqueued`);
  if (e.completed !== want) problems.push(`the system counts ${e.completed} completed, want ${want}`);
  return problems.length > 0 ? `${e.phase}: ${problems.join('; ')}` : undefined;
}
