/** Running job: one claimed item in an executor slot, as its scheduler sees it (made by job-run.ts). */
import type { ClaimedItem } from '../ledger/types.js';
import type { AbortReason } from './errors.js';
import type { Outcome } from './job-outcome.js';

export interface RunningJob {
  item: ClaimedItem;
  /** Runs the handler and writes the outcome; `done` settles with it. Call once. */
  start(): void;
  /** How long the handler ran (ms), once it has settled; undefined if it never ran. */
  readonly handlerMs: number | undefined;
  /** Aborts the handler's signal (shutdown); the outcome then follows the abort rules. */
  abort(reason: AbortReason): void;
  /** Stop waiting for the handler: leave its lease to expire, write nothing. */
  abandon(): void;
  /**
   * Renews the lease now, so a cancel the ledger holds for this item aborts
   * the handler at once (a control-stream cancel is only a hint: the ledger decides).
   */
  checkLedger(): void;
  /** The consumer's clock: renews the lease when due (returns whether it did), enforces a long deadline. */
  tick(nowMs: number): boolean;
  /**
   * The consumer's clock, when another lease renews in this tick: renew along with it once a sixth of the lease has
   * passed.
   */
  joinRenewals(nowMs: number): void;
  /** The outcome is written (or given up on). */
  done: Promise<Outcome>;
  /** Once done: false when the write said the item's lane has nothing left waiting; undefined when not known. */
  readonly laneAdvanced: boolean | undefined;
  /**
   * Once done: false when the write said the item's key left no admitted item for a claim; undefined when not known.
   */
  readonly keyAdmitted: boolean | undefined;
  /** The handler's latest ctx.progress report, when it was a number (the metrics' gauge reads it). */
  readonly progressPercent: number | undefined;
}
