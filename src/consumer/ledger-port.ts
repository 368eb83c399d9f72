import type { LedgerOperations } from '../ledger/operations.js';

/**
 * What a consumer calls on the ledger, and nothing more: the claim rounds,
 * a job's run, its lease keeper and the batch completer take this, so a test
 * can hand them a ledger of its own (a wrapper that counts or fails calls)
 * instead of patching methods of a real Ledger.
 */
export type ConsumerLedger = PickPresent<
  LedgerOperations,
  | 'assertSchemaCurrent'
  | 'claim'
  | 'claimByIds'
  | 'heldUnderLease'
  | 'countProcessing'
  | 'setConcurrencyLimit'
  | 'setFairness'
  | 'pausedQueues'
  | 'release'
  | 'skip'
  | 'renew'
  | 'renewMany'
  | 'checkpoint'
  | 'saveProgress'
  | 'steps'
  | 'recordStep'
  | 'recordStepWithin'
  | 'retry'
  | 'fail'
  | 'block'
  | 'cancelClaimed'
  | 'completeWithin'
  | 'completeManyWithin'
  | 'completeManyClaimingNext'
  | 'sweepSignals'
  | 'takeRate'
  | 'reserveRateTurn'
  | 'pushRateWindow'
  | 'consumerBeat'
  | 'consumerGone'
>;

/**
 * Pick without the `keyof` constraint: the published .d.ts leaves out
 * the ledger's engine-only operations (stripInternal), and a plain Pick of
 * them does not compile there, so every part of the port below is taken
 * with this (test/package-types.test.ts compiles the packed declarations).
 */
type PickPresent<T, K extends PropertyKey> = { [P in K & keyof T]: T[P] };

/** The part of the port the batch completer writes through. */
export type CompletionLedger = PickPresent<ConsumerLedger, 'completeManyClaimingNext'>;

/** The part of the port a batch gatherer completes its items through. */
export type BatchLedger = PickPresent<ConsumerLedger, 'completeManyWithin'>;

/** The part of the port `ctx.step` records through. */
export type StepLedger = PickPresent<ConsumerLedger, 'steps' | 'recordStep' | 'recordStepWithin'>;

/** The part of the port `ctx.progress` is saved through. */
export type ProgressLedger = PickPresent<ConsumerLedger, 'saveProgress'>;

/** The part of the port a lease keeper renews through. */
export type LeaseLedger = Pick<ConsumerLedger, 'renew'>;
