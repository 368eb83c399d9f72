import { encodeProgress } from '../ledger/outcomes.js';
import type { HeldItem } from '../ledger/types.js';
import type { ProgressWriter } from './renewals.js';

/** A run's progress is written at most this often (docs/design/batches-and-steps.md, Progress). */
export const PROGRESS_WRITE_INTERVAL_MS = 1000;

const NONE: unique symbol = Symbol('no report');

/**
 * One run's ctx.progress reports, kept in memory and written by the
 * consumer's clock at most once a second (the newest report wins), and once
 * more before the item's outcome is written, so the terminal item keeps the
 * last one. A failed write keeps the report for the next tick.
 */
export class ProgressReporter {
  private pending: unknown = NONE;
  private lastWriteMs = Number.NEGATIVE_INFINITY;
  private writing: Promise<void> | undefined;
  /** The newest report, as a number when it is one (the metrics' gauge reads it). */
  latest: unknown = NONE;

  constructor(
    private readonly writer: ProgressWriter,
    private readonly handle: HeldItem,
    private readonly onWritten: () => void,
  ) {}

  /** Takes a report; throws a ValidationError naming `progress` for one the ledger would not store. */
  report(value: unknown): void {
    encodeProgress(value);
    this.pending = value;
    this.latest = value;
  }

  /** The consumer's clock: writes the newest report once a second has passed since the last write. */
  tick(nowMs: number): void {
    if (this.pending !== NONE && this.writing === undefined && nowMs - this.lastWriteMs >= PROGRESS_WRITE_INTERVAL_MS)
      void this.write(nowMs);
  }

  /** Writes what is not written yet (before the outcome). */
  async flush(): Promise<void> {
    if (this.writing !== undefined) await this.writing;
    if (this.pending !== NONE) await this.write(Date.now());
  }

  private write(nowMs: number): Promise<void> {
    const value = this.pending;
    this.pending = NONE;
    this.lastWriteMs = nowMs;
    this.writing = this.writer.save(this.handle, value).then(
      () => this.onWritten(),
      () => {
        if (this.pending === NONE) this.pending = value;
      },
    );
    return this.writing.finally(() => (this.writing = undefined));
  }
}
