import type { Transaction } from 'kysely';
import { ValidationError } from '../errors.js';
import type { LedgerConfigInput } from './config.js';
import type { Executor, LedgerDb } from './connection.js';
import {
  checkEnqueueInput,
  enqueueItems,
  enqueueItemsClaiming,
  type ClaimAtInsert,
  type EnqueueTarget,
} from './enqueue-items.js';
import {
  blockSchema,
  claimByIdsSchema,
  claimSchema,
  enqueueItemFieldsSchema,
  failSchema,
  listDeadSchema,
  releaseSchema,
  repairSchema,
  replaySchema,
  retrySchema,
  successorClaimSchema,
  wakeDependencySchema,
  type ClaimCandidate,
  type ClaimInput,
  type EnqueueInput,
  type EnqueueOptions,
  type ReleaseInput,
  type RetryInput,
} from './inputs.js';
import { backoffDelayMs } from './backoff.js';
import { releasesSinceSpentAttempt } from './sql/complete/deferrals.js';
import {
  completeEntries,
  completeInTransaction,
  completeManyWithin,
  completeWithin,
  completion,
  encodeCapped,
  encodeProgress,
  errorText,
  finish,
  retryEnding,
  type FinishTarget,
} from './outcomes.js';
import { LedgerOperator } from './operator.js';
import { LedgerSchedules } from './schedules.js';
import { modeProof } from './mode-proof.js';
import { parseJson } from './rows.js';
import { finalizeBlock } from './sql/complete/block.js';
import { cancelItem } from './sql/operator/cancel.js';
import { claimByIds, claimHeads, readHeldUnderLease } from './sql/claim/claim.js';
import { wakeDependency } from './sql/waits/dependency.js';
import { getAttempts, getItem, listDead } from './sql/operator/inspect.js';
import { renewLeases, saveCheckpoint, saveProgress } from './sql/run/lease.js';
import { explainItem } from './explain.js';
import { replayItem } from './sql/operator/replay.js';
import { requestDigestsOnce } from './sql/enqueue/request-digests.js';
import { repairItem } from './sql/operator/repair.js';
import { newId } from './ids.js';
import { queueStats } from './sql/operator/stats.js';
import { readSteps, recordStep, type StepHolder } from './sql/run/steps.js';
import { LedgerUpkeep } from './ledger-upkeep.js';
import type {
  AttemptRecord,
  CancelOutcome,
  ClaimedItem,
  ClaimOutcome,
  ConcurrencyLimits,
  EnqueueResult,
  Explanation,
  FinalizeResult,
  HeldItem,
  ItemState,
  LeaseHandle,
  QueueClass,
  QueueStats,
  RenewOutcome,
  RepairResult,
  StepRecord,
  SuccessorClaim,
  WokenItem,
  WorkItem,
} from './types.js';
import {
  concurrencyLimitSchema,
  fairnessSchema,
  itemId,
  positiveDurationMs,
  queueName,
  reasonText,
  stepName,
  typeName,
  validate,
} from './validation.js';
import { readKeyLimits, setKeyLimit } from './sql/keys/limits.js';
import { pausedQueues, staleOnlyQueues, writeQueueSetting } from './sql/queues/queue-settings.js';
import { KeyLines } from './key-lines.js';

export { DEFAULT_MAX_ATTEMPTS, MAX_CLAIM_ITEMS } from './inputs.js';
export type { ClaimCandidate, ClaimInput, EnqueueInput, EnqueueOptions, ReleaseInput, RetryInput } from './inputs.js';
export type { FinalizeResult } from './types.js';

/** The ledger: every read and write of a work item goes through here (docs/design.md §3, §8). */
export class Ledger extends LedgerUpkeep {
  /** An operator's views and bulk actions: pages of items, lanes, dead groups, bulk replay and purge (src/ledger/operator.ts). */
  readonly operator: LedgerOperator;
  /** Recurring schedules: their definitions, pausing, and their fires (src/ledger/schedules.ts). */
  readonly schedules: LedgerSchedules;
  private readonly enqueueTarget: EnqueueTarget;
  private readonly finishTarget: FinishTarget;

  constructor(config: LedgerConfigInput, db?: LedgerDb) {
    super(config, db);
    const { db: ledgerDb, tables, knownCapabilities: capabilities } = this;
    this.enqueueTarget = {
      db: ledgerDb,
      tables,
      capabilities,
      payloadMaxBytes: this.config.payloadMaxBytes,
      itemFields: enqueueItemFieldsSchema(),
      requestDigests: requestDigestsOnce(ledgerDb, tables),
    };
    const { resultMaxBytes, errorMaxChars } = this.config;
    this.finishTarget = { db: ledgerDb, tables, capabilities, resultMaxBytes, errorMaxChars, keyLines: new KeyLines() };
    this.operator = new LedgerOperator(ledgerDb, tables, capabilities);
    this.schedules = new LedgerSchedules(ledgerDb, tables, (input) => this.checkEnqueue(input));
  }

  async enqueue(input: EnqueueInput, opts: EnqueueOptions = {}): Promise<EnqueueResult> {
    const [result] = await enqueueItems(this.enqueueTarget, [input], opts, '');
    if (!result) throw new Error('enqueue: no result');
    return result;
  }

  /** Throws the ValidationError `enqueue(input)` would, writing nothing. @internal */
  checkEnqueue(input: EnqueueInput): void {
    checkEnqueueInput(this.enqueueTarget, input);
  }

  /** One round trip per batch (a few statements), whatever its size. Results are in input order. */
  enqueueMany(inputs: readonly EnqueueInput[], opts: EnqueueOptions = {}): Promise<EnqueueResult[]> {
    if (!Array.isArray(inputs)) throw new ValidationError([{ field: 'items', message: 'must be an array' }], 'enqueue');
    return enqueueItems(this.enqueueTarget, inputs, opts, 'items');
  }

  /**
   * Enqueues like enqueueMany, and lets the caller claim at insert: `reserve`
   * sees the items that may be inserted claimed (enqueue-items.ts says which)
   * and may answer a lease, under which up to `max` of them are inserted
   * (processing, attempt 1). Returns the results in input order and the items
   * inserted claimed.
   * @internal
   */
  async enqueueClaiming(
    inputs: readonly EnqueueInput[],
    reserve: (eligible: readonly ClaimCandidate[]) => ClaimAtInsert | undefined,
  ): Promise<{ results: EnqueueResult[]; claimed: ClaimedItem[] }> {
    if (!Array.isArray(inputs)) throw new ValidationError([{ field: 'items', message: 'must be an array' }], 'enqueue');
    return enqueueItemsClaiming(this.enqueueTarget, inputs, reserve);
  }

  /** Claims up to `limit` due lane heads with a fresh lease. */
  claim(input: ClaimInput): Promise<ClaimOutcome> {
    const v = validate(claimSchema, input, 'claim');
    return this.knownCapabilities().then((caps) => claimHeads(this.db, caps, this.tables, v));
  }

  /**
   * Claims exactly these items if each is still a due pending head (targeted
   * wake-ups); with `types`, only items of those types (a wake-up may name others).
   * @internal
   */
  claimByIds(input: Omit<ClaimInput, 'limit' | 'classes'> & { ids: string[] }): Promise<ClaimedItem[]> {
    const v = validate(claimByIdsSchema, input, 'claimByIds');
    return this.knownCapabilities().then((caps) => claimByIds(this.db, caps, this.tables, v));
  }

  /** The items of `queue` held under lease `token` now: a consumer's recovery of a lost handoff (docs/design.md §6). @internal */
  heldUnderLease(spec: {
    queue: string;
    classes: readonly QueueClass[];
    owner: string;
    token: string;
    leaseMs: number;
  }): Promise<ClaimedItem[]> {
    return readHeldUnderLease(this.db, this.tables, spec);
  }

  renew(handle: Pick<LeaseHandle, 'id' | 'leaseToken' | 'group'>, leaseMs: number): Promise<RenewOutcome> {
    return this.renewMany([handle], leaseMs).then(([outcome]) => outcome!);
  }

  /** Renews many leases in one statement: per handle, in order, whether it is still held and whether its cancel was requested. */
  renewMany(
    handles: readonly Pick<LeaseHandle, 'id' | 'leaseToken' | 'group'>[],
    leaseMs: number,
  ): Promise<RenewOutcome[]> {
    validate(positiveDurationMs, leaseMs, 'renew', 'leaseMs');
    return this.knownCapabilities().then((caps) => renewLeases(this.db, caps, this.tables, handles, leaseMs));
  }

  /** Stores the item's checkpoint; false when the lease is no longer held, OwnershipLostError when its ownership epoch moved on. */
  checkpoint(handle: HeldItem, value: unknown): Promise<boolean> {
    const json = encodeCapped(value, this.config.payloadMaxBytes, 'checkpoint');
    return saveCheckpoint(this.db, this.tables, handle, json);
  }

  /**
   * Stores the latest progress report of each held item (ctx.progress), in
   * one statement; a report of a lease no longer held, or claimed under an ownership epoch that moved on, is dropped. Each value is
   * a number from 0 to 100 or a small JSON object (ValidationError otherwise).
   * @internal
   */
  async saveProgress(reports: readonly { handle: HeldItem; progress: unknown }[]): Promise<void> {
    const rows = reports.map((r) => ({
      id: r.handle.id,
      leaseToken: r.handle.leaseToken,
      queue: r.handle.queue,
      epoch: r.handle.epoch,
      json: encodeProgress(r.progress),
    }));
    return saveProgress(this.db, this.tables, rows);
  }

  /** The durable steps item `id` has done (ctx.step), in the order they were done. */
  async steps(id: string): Promise<StepRecord[]> {
    validate(itemId, id, 'steps', 'id');
    // A step whose fn returned undefined stored no result, and gives undefined back.
    return (await readSteps(this.db, this.tables, id)).map(({ resultJson, ...s }) => ({
      ...s,
      result: resultJson === null ? undefined : parseJson(resultJson),
    }));
  }

  /**
   * Records a durable step with `value` as its result (ctx.step), fenced by
   * the holder's token: LeaseLostError when it no longer holds the item.
   * @internal
   */
  async recordStep(handle: StepHolder, name: string, value: unknown): Promise<void> {
    validate(stepName, name, 'ctx.step', 'name');
    const resultJson = value === undefined ? null : encodeCapped(value, this.config.resultMaxBytes, 'step result');
    return recordStep(this.db, this.tables, handle, name, () => Promise.resolve({ value: undefined, resultJson }));
  }

  /**
   * ctx.step with `transaction: true`: `fn`'s writes and the step's record
   * commit together, or neither does (fn runs again after a lost connection
   * or a conflict, as in completeWithin). LeaseLostError when the holder lost the item.
   * @internal
   */
  async recordStepWithin<T>(
    handle: StepHolder,
    name: string,
    fn: (trx: Transaction<Record<string, never>>) => Promise<T>,
  ): Promise<T> {
    validate(stepName, name, 'ctx.step', 'name');
    return recordStep(this.db, this.tables, handle, name, async (trx) => {
      const value = await fn(trx);
      return {
        value,
        resultJson: value === undefined ? null : encodeCapped(value, this.config.resultMaxBytes, 'step result'),
      };
    });
  }

  /** Completes the attempt. A result that cannot be stored ends the item dead, class `result_too_large` / `invalid_result`. */
  async complete(handle: LeaseHandle, result?: unknown): Promise<FinalizeResult> {
    return finish(this.finishTarget, handle, completion(result, this.config.resultMaxBytes));
  }

  /**
   * Completes many claimed items with a fixed number of round trips (one
   * transaction), each still a CAS on its own lease token. Results in input
   * order; a result that cannot be stored ends that item as in `complete`.
   */
  async completeMany(entries: readonly { handle: LeaseHandle; result?: unknown }[]): Promise<FinalizeResult[]> {
    return (await this.completeManyClaimingNext(entries)).results;
  }

  /**
   * completeMany with lane and key affinity (docs/design.md §6): up to
   * `next.max` new heads its completions make, due and of `next`'s classes
   * and types, are claimed in the same transaction under `next`'s lease
   * (attempt + 1). With several rooms, a lane's next heads go to the first,
   * and the items keys admit to each in turn.
   * @internal
   */
  async completeManyClaimingNext(
    entries: readonly { handle: LeaseHandle; result?: unknown }[],
    next?: SuccessorClaim | readonly SuccessorClaim[],
  ): Promise<{ results: FinalizeResult[]; claimed: ClaimedItem[] }> {
    const rooms: readonly SuccessorClaim[] = next === undefined ? [] : 'token' in next ? [next] : next;
    const successors = rooms.map((r) => validate(successorClaimSchema, r, 'completeManyClaimingNext'));
    return completeEntries(this.finishTarget, entries, successors);
  }

  /**
   * `fn` and this item's completion (`fn`'s value its result) in one ledger
   * transaction, for ctx.transaction; run again after a lost connection, and
   * settled by reading the item after an unanswered COMMIT (outcomes.ts,
   * completeWithin). Also says whether the item's lane got a new head (false: it went idle).
   * Throws LeaseLostError when the CAS loses.
   * @internal
   */
  completeWithin<T>(
    handle: LeaseHandle,
    fn: (trx: Transaction<Record<string, never>>) => Promise<T>,
  ): Promise<{ value: T; laneAdvanced: boolean | undefined }> {
    return completeWithin(this.finishTarget, handle, fn);
  }

  /**
   * A batch handler's ctx.transaction: `fn`, then the completion of each
   * item `completions` names (of `handles`), in one ledger transaction;
   * LeaseLostError when one CAS loses (nothing commits).
   * @internal
   */
  completeManyWithin<T>(
    handles: readonly LeaseHandle[],
    fn: (trx: Transaction<Record<string, never>>) => Promise<T>,
    completions: (value: T) => readonly { id: string; result: unknown }[],
  ): Promise<{ value: T; completed: Map<string, boolean | undefined> }> {
    return completeManyWithin(this.finishTarget, handles, fn, completions);
  }

  /**
   * Completes inside the caller's transaction on this ledger's database, so
   * the caller's writes and the completion commit together. Throws
   * LeaseLostError (the caller's transaction must roll back) when the CAS loses.
   */
  async completeInTransaction(trx: Executor, handle: LeaseHandle, result?: unknown): Promise<void> {
    await completeInTransaction(this.finishTarget, modeProof(trx), handle, result);
  }

  /** Ends a claimed item whose cancel was requested while it ran; without a reason, the request's reason stays its last error. */
  cancelClaimed(handle: LeaseHandle, reason?: string): Promise<FinalizeResult> {
    return finish(this.finishTarget, handle, { f: { kind: 'cancelled', reason: reason ?? null }, state: 'cancelled' });
  }

  /** A failed attempt: back to pending after the backoff, or dead once the budget is spent. */
  async retry(handle: LeaseHandle, input: RetryInput): Promise<FinalizeResult & { delayMs: number }> {
    const ending = retryEnding(this.finishTarget, handle, validate(retrySchema, input, 'retry'));
    return { ...(await finish(this.finishTarget, handle, ending)), delayMs: ending.delayMs };
  }

  /** A permanent failure: dead at once. */
  fail(handle: LeaseHandle, input: { error: unknown; failureClass?: string }): Promise<FinalizeResult> {
    const v = validate(failSchema, input, 'fail');
    const error = errorText(v.error, this.config.errorMaxChars);
    return finish(this.finishTarget, handle, {
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
        : backoffDelayMs(v.backoff, (await releasesSinceSpentAttempt(this.db, this.tables, handle)) + 1);
    const r = await finish(this.finishTarget, handle, {
      f: { kind: 'release', delayMs, reason: v.reason ?? null },
      state: 'pending',
    });
    return { ...r, delayMs };
  }

  /**
   * Ends a claimed item `skipped` (nothing to do: a filter that does not match, an inactive source). Its lane
   * passes on as after a completion. `reason` is stored as its result (JSON) and, as text, as its last error and in its history.
   */
  skip(handle: LeaseHandle, reason?: unknown): Promise<FinalizeResult> {
    const reasonJson = reason === undefined ? null : encodeCapped(reason, this.config.resultMaxBytes, 'reason');
    const reasonText = reason === undefined ? null : errorText(reason, this.config.errorMaxChars);
    return finish(this.finishTarget, handle, { f: { kind: 'skip', reasonJson, reasonText }, state: 'skipped' });
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
    const outcome = await finalizeBlock(this.db, this.tables, handle, {
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

  wakeDependency(key: string, opts: { queue?: string } = {}): Promise<WokenItem[]> {
    const v = validate(wakeDependencySchema, { key, ...opts }, 'wakeDependency');
    return wakeDependency(this.db, this.tables, v);
  }

  cancel(id: string, reason?: string): Promise<CancelOutcome> {
    validate(itemId, id, 'cancel', 'id');
    if (reason !== undefined) validate(reasonText, reason, 'cancel', 'reason');
    return cancelItem(this.db, this.tables, id, reason ?? null);
  }

  /** Re-drives a dead or cancelled item as a new item; guarded by the attempt and error digest the operator saw. */
  replay(id: string, guard: { expectAttempt: number; expectErrorDigest: string }): Promise<{ id: string }> {
    const v = validate(replaySchema, { id, ...guard }, 'replay');
    return this.capabilities().then((caps) => replayItem(this.db, this.tables, v, caps.idOrder));
  }

  /**
   * Repairs a dead or cancelled item in place (docs/design.md §3, Repair):
   * back to pending as itself, with its id, lane place and idempotency key,
   * its checkpoint and steps, and a fresh attempt budget (attempt 0 of its
   * maxAttempts). Guarded as `replay` is, by the attempt count and the error
   * digest the operator saw; `reason` and `actor` go into its history, on a
   * row whose id is the repair id (given, to make a repeated call safe, or
   * made). Refused with RepairRejectedError (nothing written) when the guard
   * does not hold, the item was replayed, or its lane's head is running.
   */
  async repair(
    id: string,
    opts: { expectAttempt: number; expectErrorDigest: string; reason: string; actor: string; repairId?: string },
  ): Promise<RepairResult> {
    const v = validate(repairSchema, { id, ...opts }, 'repair');
    return repairItem(this.db, this.tables, { ...v, repairId: v.repairId ?? newId() });
  }

  /** Depth by state per queue, counted now from bounded index ranges (src/ledger/sql/operator/stats.ts). */
  stats(queue?: string): Promise<QueueStats[]> {
    if (queue !== undefined) validate(queueName, queue, 'stats', 'queue');
    return queueStats(this.db, this.tables, queue);
  }

  /** An item, its attempt history and its durable steps, for an operator. */
  async inspect(id: string): Promise<{ item: WorkItem; attempts: AttemptRecord[]; steps: StepRecord[] } | undefined> {
    validate(itemId, id, 'inspect', 'id');
    const item = await getItem(this.db, this.tables, id);
    if (!item) return undefined;
    const [attempts, steps] = await Promise.all([getAttempts(this.db, this.tables, id), this.steps(id)]);
    return { item, attempts, steps };
  }

  /** Why an item is where it is: a reason code, a sentence and its facts (docs/design.md §7, "Why isn't it running?"). */
  explain(id: string): Promise<Explanation | undefined> {
    validate(itemId, id, 'explain', 'id');
    return explainItem(this.db, this.tables, id);
  }

  /**
   * How many items of one concurrency key of `queue` may be admitted at once
   * (docs/design.md §3, Concurrency keys); null lifts the limit. Stored in
   * the ledger, so every producer and consumer of the queue holds to it; a
   * raised limit admits waiting items at once. Returns how many keys had
   * items waiting.
   *
   * With `{ type }`, the limit is that type's own: its items enqueued from
   * then on are admitted per key and type, counted apart from the queue's
   * limit and the other types'. An item keeps the limit that admitted it
   * until it ends; null lifts the type's own limit, and its later items fall
   * under the queue's.
   */
  async setConcurrencyLimit(queue: string, limit: number | null, options: { type?: string } = {}): Promise<number> {
    validate(queueName, queue, 'setConcurrencyLimit', 'queue');
    validate(concurrencyLimitSchema, limit, 'setConcurrencyLimit', 'limit');
    if (options.type !== undefined) validate(typeName, options.type, 'setConcurrencyLimit', 'type');
    return setKeyLimit(this.db, this.tables, queue, limit, options.type);
  }

  /** The queue's limit per concurrency key and its types' own, as the ledger holds them now. */
  concurrencyLimits(queue: string): Promise<ConcurrencyLimits> {
    validate(queueName, queue, 'concurrencyLimits', 'queue');
    return readKeyLimits(this.db, this.tables, queue);
  }

  /**
   * `'key'`: the queue serves its concurrency keys in turn (docs/design.md §3,
   * Fair queues): each keyed item enqueued from now on takes its key's next
   * round as its priority, so claims take one key's items no faster than
   * another's, however many items or lanes a key has. `null`: oldest first.
   */
  async setFairness(queue: string, fairness: 'key' | null): Promise<void> {
    validate(queueName, queue, 'setFairness', 'queue');
    validate(fairnessSchema, fairness, 'setFairness', 'fairness');
    await writeQueueSetting(this.db, this.tables, queue, 'fair', fairness === 'key' ? 1 : 0);
  }

  /**
   * Pauses a queue (docs/design.md §7, Pausing a queue): its consumers claim
   * nothing, by any path, in any process, from their next sweep (at once
   * through `Producer.pause`, which also tells them on the control stream);
   * enqueues still commit, and items already running finish. Held by the
   * ledger until resume(). The claim statements themselves do not check it:
   * a program calling `claim` directly checks `pausedQueues` first.
   */
  async pause(queue: string): Promise<void> {
    validate(queueName, queue, 'pause', 'queue');
    await writeQueueSetting(this.db, this.tables, queue, 'paused', 1);
  }

  /** Resumes a paused queue: claims run again. */
  async resume(queue: string): Promise<void> {
    validate(queueName, queue, 'resume', 'queue');
    await writeQueueSetting(this.db, this.tables, queue, 'paused', 0);
  }

  /**
   * Stale-only (docs/design.md §6, "Stale-only claims"): while on, the
   * queue's consumers claim only rescued work, items whose lease expired,
   * and no new pending work, from their next sweep. Held by the ledger until
   * set off. For a struggling database: the work that was held is finished,
   * and nothing new is taken on.
   */
  async setStaleOnly(queue: string, on: boolean): Promise<void> {
    validate(queueName, queue, 'setStaleOnly', 'queue');
    if (typeof on !== 'boolean')
      throw new ValidationError([{ field: 'on', message: 'must be true or false' }], 'setStaleOnly');
    await writeQueueSetting(this.db, this.tables, queue, 'stale_only', on ? 1 : 0);
  }

  /** Which of these queues are stale-only. */
  async staleOnlyQueues(queues: readonly string[]): Promise<Set<string>> {
    for (const q of queues) validate(queueName, q, 'staleOnlyQueues', 'queue');
    return staleOnlyQueues(this.db, this.tables, queues);
  }

  /** Which of these queues are paused. */
  async pausedQueues(queues: readonly string[]): Promise<Set<string>> {
    for (const q of queues) validate(queueName, q, 'pausedQueues', 'queue');
    return pausedQueues(this.db, this.tables, queues);
  }

  get(id: string): Promise<WorkItem | undefined> {
    validate(itemId, id, 'get', 'id');
    return getItem(this.db, this.tables, id);
  }

  listDead(opts: { queue?: string; limit?: number } = {}): Promise<WorkItem[]> {
    const v = validate(listDeadSchema, opts, 'listDead');
    return listDead(this.db, this.tables, v);
  }
}
