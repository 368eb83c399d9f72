import type { Transaction } from 'kysely';
import { backoffDelayMs } from './backoff.js';
import type { Executor } from './connection.js';
import type { LedgerCore } from './core.js';
import { blockSchema, failSchema, releaseSchema, retrySchema, successorClaimSchema } from './inputs.js';
import type { ReleaseInput, RetryInput } from './inputs.js';
import { KeyLines } from './key-lines.js';
import { modeProof } from './mode-proof.js';
import {
  completeEntries,
  completeInTransaction,
  completeManyWithin,
  completeWithin,
  completion,
  encodeCapped,
  errorText,
  finish,
  retryEnding,
  type FinishTarget,
} from './outcomes.js';
import { finishBlock } from './sql/complete/block.js';
import { releasesSinceSpentAttempt } from './sql/complete/deferrals.js';
import type { ClaimedItem, FinalizeResult, ItemState, LeaseHandle, SuccessorClaim } from './types.js';
import { validate } from './validation.js';

/** How a claimed attempt ends: completed, retried, failed, released, skipped, cancelled or blocked. */
export class LedgerFinishing {
  private readonly target: FinishTarget;

  constructor(private readonly core: LedgerCore) {
    const { db, tables } = core;
    const { resultMaxBytes, errorMaxChars } = core.config;
    const capabilities = () => core.capabilities();
    this.target = { db, tables, capabilities, resultMaxBytes, errorMaxChars, keyLines: new KeyLines() };
  }

  /**
   * Completes the attempt. A result that cannot be stored ends the item dead, class `result_too_large` /
   * `invalid_result`.
   */
  async complete(handle: LeaseHandle, result?: unknown): Promise<FinalizeResult> {
    return finish(this.target, handle, completion(result, this.core.config.resultMaxBytes));
  }

  /**
   * completeMany with lane and key affinity (docs/design/consumer.md): up to
   * `next.max` new heads its completions make, due and of `next`'s classes
   * and types, are claimed in the same transaction under `next`'s lease
   * (attempt + 1). With several rooms, a lane's next heads go to the first,
   * and the items keys admit to each in turn.
   */
  async completeManyClaimingNext(
    entries: readonly { handle: LeaseHandle; result?: unknown }[],
    next?: SuccessorClaim | readonly SuccessorClaim[],
  ): Promise<{ results: FinalizeResult[]; claimed: ClaimedItem[] }> {
    const rooms: readonly SuccessorClaim[] = next === undefined ? [] : 'token' in next ? [next] : next;
    const successors = rooms.map((r) => validate(successorClaimSchema, r, 'completeManyClaimingNext'));
    return completeEntries(this.target, entries, successors);
  }

  /**
   * `fn` and this item's completion (`fn`'s value its result) in one ledger
   * transaction, for ctx.transaction; run again after a lost connection, and
   * settled by reading the item after an unanswered COMMIT (outcomes.ts,
   * completeWithin). Also says whether the item's lane got a new head (false: it went idle).
   * Throws LeaseLostError when the CAS loses.
   */
  completeWithin<T>(
    handle: LeaseHandle,
    fn: (trx: Transaction<Record<string, never>>) => Promise<T>,
  ): Promise<{ value: T; laneAdvanced: boolean | undefined }> {
    return completeWithin(this.target, handle, fn);
  }

  /**
   * A batch handler's ctx.transaction: `fn`, then the completion of each
   * item `completions` names (of `handles`), in one ledger transaction;
   * LeaseLostError when one CAS loses (nothing commits).
   */
  completeManyWithin<T>(
    handles: readonly LeaseHandle[],
    fn: (trx: Transaction<Record<string, never>>) => Promise<T>,
    completions: (value: T) => readonly { id: string; result: unknown }[],
  ): Promise<{ value: T; completed: Map<string, boolean | undefined> }> {
    return completeManyWithin(this.target, handles, fn, completions);
  }

  /**
   * Completes inside the caller's transaction on this ledger's database, so
   * the caller's writes and the completion commit together. Throws
   * LeaseLostError (the caller's transaction must roll back) when the CAS loses.
   */
  async completeInTransaction(trx: Executor, handle: LeaseHandle, result?: unknown): Promise<void> {
    await completeInTransaction(this.target, modeProof(trx), handle, result);
  }

  /**
   * Ends a claimed item whose cancel was requested while it ran; without a reason, the request's reason
   * stays its last error.
   */
  cancelClaimed(handle: LeaseHandle, reason?: string): Promise<FinalizeResult> {
    return finish(this.target, handle, { f: { kind: 'cancelled', reason: reason ?? null }, state: 'cancelled' });
  }

  /** A failed attempt: back to pending after the backoff, or dead once the budget is spent. */
  async retry(handle: LeaseHandle, input: RetryInput): Promise<FinalizeResult & { delayMs: number }> {
    const ending = retryEnding(this.target, handle, validate(retrySchema, input, 'retry'));
    return { ...(await finish(this.target, handle, ending)), delayMs: ending.delayMs };
  }

  /** A permanent failure: dead at once. */
  fail(handle: LeaseHandle, input: { error: unknown; failureClass?: string }): Promise<FinalizeResult> {
    const v = validate(failSchema, input, 'fail');
    const error = errorText(v.error, this.core.config.errorMaxChars);
    return finish(this.target, handle, {
      f: { kind: 'dead', error, failureClass: v.failureClass ?? 'permanent' },
      state: 'dead',
    });
  }

  /**
   * Gives the item back without burning budget (deadline, drain, defer, rate limit): due again after
   * `delayMs`, or, with `backoff`, after that policy's delay for the n-th release since the item's last
   * spent attempt (n counted from its history, sql/complete/deferrals.ts). Answers the delay it wrote.
   */
  async release(handle: LeaseHandle, input: ReleaseInput = {}): Promise<FinalizeResult & { delayMs: number }> {
    const v = validate(releaseSchema, input, 'release');
    const delayMs =
      v.backoff === undefined
        ? (v.delayMs ?? 0)
        : backoffDelayMs(v.backoff, (await releasesSinceSpentAttempt(this.core.db, this.core.tables, handle)) + 1);
    const r = await finish(this.target, handle, {
      f: { kind: 'release', delayMs, reason: v.reason ?? null },
      state: 'pending',
    });
    return { ...r, delayMs };
  }

  /**
   * Ends a claimed item `skipped` (nothing to do: a filter that does not match, an inactive source). Its lane
   * passes on as after a completion. `reason` is stored as its result (JSON) and, as text, as its last error
   * and in its history.
   */
  skip(handle: LeaseHandle, reason?: unknown): Promise<FinalizeResult> {
    const { resultMaxBytes, errorMaxChars } = this.core.config;
    const reasonJson = reason === undefined ? null : encodeCapped(reason, resultMaxBytes, 'reason');
    const reasonText = reason === undefined ? null : errorText(reason, errorMaxChars);
    return finish(this.target, handle, { f: { kind: 'skip', reasonJson, reasonText }, state: 'skipped' });
  }

  /**
   * Parks the item (and its lane) until `wakeDependency(key)` or a probe.
   * If the key was woken after this attempt began (the handler may have read
   * the awaited fact just before it committed), the item goes back to
   * pending at once instead (state `pending`, no attempt spent). A re-block
   * on the same key after the wait expired (the final run a probe gives an
   * expired wait) ends it dead, class `dependency_expired` (state `dead`).
   */
  async block(
    handle: LeaseHandle,
    input: { dependencyKey: string; maxWaitMs: number; probeAfterMs?: number; reason?: string },
  ): Promise<FinalizeResult> {
    const v = validate(blockSchema, input, 'block');
    const outcome = await finishBlock(this.core.db, this.core.tables, handle, {
      kind: 'block',
      dependencyKey: v.dependencyKey,
      maxWaitMs: v.maxWaitMs,
      probeAfterMs: v.probeAfterMs ?? v.maxWaitMs,
      reason: v.reason ?? null,
    });
    if (outcome === 'expired') return { won: true, state: 'dead', failureClass: 'dependency_expired' };
    const state: ItemState = outcome === 'woken' ? 'pending' : 'blocked';
    return { won: outcome !== 'lost', state };
  }
}
