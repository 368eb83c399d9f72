import type { Transaction } from 'kysely';
import { ValidationError } from '../errors.js';
import type { LedgerConfigInput } from './config.js';
import type { Executor, LedgerDb } from './connection.js';
import { LedgerCore } from './core.js';
import {
  checkEnqueueInput,
  enqueueItems,
  enqueueItemsClaiming,
  type ClaimAtInsert,
  type EnqueueTarget,
} from './enqueue-items.js';
import { LedgerFinishing } from './finishing.js';
import { LedgerFleet } from './fleet.js';
import type { FleetGaugeReading, FleetStats } from './fleet-stats.js';
import {
  claimByIdsSchema,
  claimSchema,
  enqueueItemFieldsSchema,
  type ClaimCandidate,
  type ClaimInput,
  type EnqueueInput,
  type EnqueueOptions,
  type ReleaseInput,
  type RetryInput,
} from './inputs.js';
import { LedgerItems } from './items.js';
import { LedgerLeases } from './leases.js';
import type { LedgerOperations } from './operations.js';
import { LedgerOperator } from './operator.js';
import { LedgerWorkflows } from './workflows.js';
import { LedgerQueues } from './queues.js';
import { LedgerRates } from './rates.js';
import { LedgerSchedules } from './schedules.js';
import { claimByIds, readHeldUnderLease } from './sql/claim/by-ids.js';
import { claimHeads } from './sql/claim/heads.js';
import { requestDigestsOnce } from './sql/enqueue/request-digests.js';
import { QueueGate } from './queue-gate.js';
import type { QueueRow } from './sql/queues/drain.js';
import type { ConsumerRow } from './sql/fleet/consumers.js';
import type { StepHolder } from './sql/run/steps.js';
import type {
  AttemptRecord,
  CancelOutcome,
  ClaimedItem,
  ClaimOutcome,
  ConcurrencyLimits,
  EnqueueResult,
  FinalizeResult,
  HeldItem,
  LeaseHandle,
  LiveConsumer,
  Ownership,
  QueueClass,
  QueueSettings,
  QueueStats,
  RateAnswer,
  RenewOutcome,
  RepairResult,
  StepRecord,
  SuccessorClaim,
  WorkItem,
} from './types.js';
import type { ProbeOutcome, ReclaimOutcome, SweepSignal, WokenItem } from './upkeep-types.js';
import type { Explanation } from './operator-types.js';
import { LedgerUpkeep } from './upkeep.js';
import { validate } from './validation.js';

export { DEFAULT_MAX_ATTEMPTS, MAX_CLAIM_ITEMS } from './inputs.js';
export type { ClaimCandidate, ClaimInput, EnqueueInput, EnqueueOptions, ReleaseInput, RetryInput } from './inputs.js';
export type { FinalizeResult } from './types.js';

type Trx = Transaction<Record<string, never>>;
type Lease = Pick<LeaseHandle, 'id' | 'leaseToken' | 'group'>;
type Done = { handle: LeaseHandle; result?: unknown };

/**
 * The ledger: every read and write of a work item goes through here (docs/design/states.md, §8). Its operations
 * are listed by noun in operations.ts; enqueue and claim are here, the rest in the part each belongs to.
 */
export class Ledger extends LedgerCore implements LedgerOperations {
  /** An operator's views and bulk actions: pages of items, lanes, dead groups, bulk replay and purge (operator.ts). */
  readonly operator: LedgerOperator;
  /** Recurring schedules: their definitions, pausing, and their fires (src/ledger/schedules.ts). */
  readonly schedules: LedgerSchedules;
  /** Workflows: jobs that run after other jobs (workflows.ts, docs/design/workflows.md). */
  readonly workflows: LedgerWorkflows;
  private readonly enqueueTarget: EnqueueTarget;
  private readonly leases = new LedgerLeases(this);
  private readonly finishing = new LedgerFinishing(this);
  private readonly items = new LedgerItems(this);
  private readonly queues = new LedgerQueues(this);
  private readonly rates = new LedgerRates(this);
  private readonly fleet = new LedgerFleet(this);
  private readonly upkeep = new LedgerUpkeep(this);

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
      gate: new QueueGate(ledgerDb, tables),
    };
    this.operator = new LedgerOperator(ledgerDb, tables, capabilities);
    this.workflows = new LedgerWorkflows(this.enqueueTarget);
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
   * Enqueues like enqueueMany, and lets the caller claim at insert: `reserve` sees the items that may be inserted
   * claimed (enqueue-items.ts says which) and may answer a lease, under which up to `max` of them are inserted
   * (processing, attempt 1). Returns the results in input order and the items inserted claimed. @internal
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

  /** Claims these items if each is still a due pending head (wake-ups); with `types`, only those types. @internal */
  claimByIds(input: Omit<ClaimInput, 'limit' | 'classes'> & { ids: string[] }): Promise<ClaimedItem[]> {
    const v = validate(claimByIdsSchema, input, 'claimByIds');
    return this.knownCapabilities().then((caps) => claimByIds(this.db, caps, this.tables, v));
  }

  /**
   * The items of `queue` held under lease `token` now: a consumer's recovery of a lost handoff
   * (docs/design/consumer.md). @internal
   */
  heldUnderLease(spec: {
    queue: string;
    classes: readonly QueueClass[];
    owner: string;
    token: string;
    leaseMs: number;
  }): Promise<ClaimedItem[]> {
    return readHeldUnderLease(this.db, this.tables, spec);
  }

  // Lease (leases.ts)
  renew(handle: Lease, leaseMs: number): Promise<RenewOutcome> {
    return this.renewMany([handle], leaseMs).then(([outcome]) => outcome!);
  }
  renewMany(handles: readonly Lease[], leaseMs: number): Promise<RenewOutcome[]> {
    return this.leases.renewMany(handles, leaseMs);
  }
  checkpoint(handle: HeldItem, value: unknown): Promise<boolean> {
    return this.leases.checkpoint(handle, value);
  }
  /** @internal */
  saveProgress(reports: readonly { handle: HeldItem; progress: unknown }[]): Promise<void> {
    return this.leases.saveProgress(reports);
  }
  /** @internal */
  recordStep(handle: StepHolder, name: string, value: unknown): Promise<void> {
    return this.leases.recordStep(handle, name, value);
  }
  /** @internal */
  recordStepWithin<T>(handle: StepHolder, name: string, fn: (trx: Trx) => Promise<T>): Promise<T> {
    return this.leases.recordStepWithin(handle, name, fn);
  }

  // Attempt: how it finishes (finishing.ts)
  complete(handle: LeaseHandle, result?: unknown): Promise<FinalizeResult> {
    return this.finishing.complete(handle, result);
  }
  async completeMany(entries: readonly Done[]): Promise<FinalizeResult[]> {
    return (await this.completeManyClaimingNext(entries)).results;
  }
  /** @internal */
  completeManyClaimingNext(
    entries: readonly Done[],
    next?: SuccessorClaim | readonly SuccessorClaim[],
  ): Promise<{ results: FinalizeResult[]; claimed: ClaimedItem[] }> {
    return this.finishing.completeManyClaimingNext(entries, next);
  }
  /** @internal */
  completeWithin<T>(
    handle: LeaseHandle,
    fn: (trx: Trx) => Promise<T>,
  ): Promise<{ value: T; laneAdvanced: boolean | undefined }> {
    return this.finishing.completeWithin(handle, fn);
  }
  /** @internal */
  completeManyWithin<T>(
    handles: readonly LeaseHandle[],
    fn: (trx: Trx) => Promise<T>,
    completions: (value: T) => readonly { id: string; result: unknown }[],
  ): Promise<{ value: T; completed: Map<string, boolean | undefined> }> {
    return this.finishing.completeManyWithin(handles, fn, completions);
  }
  completeInTransaction(trx: Executor, handle: LeaseHandle, result?: unknown): Promise<void> {
    return this.finishing.completeInTransaction(trx, handle, result);
  }
  cancelClaimed(handle: LeaseHandle, reason?: string): Promise<FinalizeResult> {
    return this.finishing.cancelClaimed(handle, reason);
  }
  retry(handle: LeaseHandle, input: RetryInput): Promise<FinalizeResult & { delayMs: number }> {
    return this.finishing.retry(handle, input);
  }
  fail(handle: LeaseHandle, input: { error: unknown; failureClass?: string }): Promise<FinalizeResult> {
    return this.finishing.fail(handle, input);
  }
  release(handle: LeaseHandle, input: ReleaseInput = {}): Promise<FinalizeResult & { delayMs: number }> {
    return this.finishing.release(handle, input);
  }
  skip(handle: LeaseHandle, reason?: unknown): Promise<FinalizeResult> {
    return this.finishing.skip(handle, reason);
  }
  block(
    handle: LeaseHandle,
    input: { dependencyKey: string; maxWaitMs: number; probeAfterMs?: number; reason?: string },
  ): Promise<FinalizeResult> {
    return this.finishing.block(handle, input);
  }

  // Item by id (items.ts)
  get(id: string): Promise<WorkItem | undefined> {
    return this.items.get(id);
  }
  listDead(opts: { queue?: string; limit?: number } = {}): Promise<WorkItem[]> {
    return this.items.listDead(opts);
  }
  steps(id: string): Promise<StepRecord[]> {
    return this.items.steps(id);
  }
  inspect(id: string): Promise<{ item: WorkItem; attempts: AttemptRecord[]; steps: StepRecord[] } | undefined> {
    return this.items.inspect(id);
  }
  explain(id: string): Promise<Explanation | undefined> {
    return this.items.explain(id);
  }
  cancel(id: string, reason?: string): Promise<CancelOutcome> {
    return this.items.cancel(id, reason);
  }
  replay(id: string, guard: { expectAttempt: number; expectErrorDigest: string }): Promise<{ id: string }> {
    return this.items.replay(id, guard);
  }
  repair(
    id: string,
    opts: { expectAttempt: number; expectErrorDigest: string; reason: string; actor: string; repairId?: string },
  ): Promise<RepairResult> {
    return this.items.repair(id, opts);
  }
  wakeDependency(key: string, opts: { queue?: string } = {}): Promise<WokenItem[]> {
    return this.items.wakeDependency(key, opts);
  }
  stats(queue?: string): Promise<QueueStats[]> {
    return this.items.stats(queue);
  }

  // Queue settings (queues.ts)
  setConcurrencyLimit(queue: string, limit: number | null, options: { type?: string } = {}): Promise<number> {
    return this.queues.setConcurrencyLimit(queue, limit, options);
  }
  concurrencyLimits(queue: string): Promise<ConcurrencyLimits> {
    return this.queues.concurrencyLimits(queue);
  }
  setFairness(queue: string, fairness: 'key' | null): Promise<void> {
    return this.queues.setFairness(queue, fairness);
  }
  pause(queue: string): Promise<void> {
    return this.queues.pause(queue);
  }
  resume(queue: string): Promise<void> {
    return this.queues.resume(queue);
  }
  pausedQueues(queues: readonly string[]): Promise<Set<string>> {
    return this.queues.pausedQueues(queues);
  }
  setStaleOnly(queue: string, on: boolean): Promise<void> {
    return this.queues.setStaleOnly(queue, on);
  }
  staleOnlyQueues(queues: readonly string[]): Promise<Set<string>> {
    return this.queues.staleOnlyQueues(queues);
  }
  setDrainOnly(queue: string, on: boolean): Promise<void> {
    return this.queues.setDrainOnly(queue, on);
  }
  drainOnlyQueues(queues: readonly string[]): Promise<Set<string>> {
    return this.queues.drainOnlyQueues(queues);
  }
  queueRows(queues?: readonly string[]): Promise<QueueRow[]> {
    return this.queues.queueRows(queues);
  }
  createQueue(queue: string, settings?: QueueSettings): Promise<boolean> {
    return this.queues.createQueue(queue, settings);
  }
  updateQueue(queue: string, settings: QueueSettings): Promise<void> {
    return this.queues.updateQueue(queue, settings);
  }
  deleteQueue(queue: string): Promise<{ items: number }> {
    return this.queues.deleteQueue(queue);
  }

  // Upkeep (upkeep.ts)
  reclaimExpired(opts: { queue?: string; limit?: number } = {}): Promise<ReclaimOutcome> {
    return this.upkeep.reclaimExpired(opts);
  }
  sweepSignals(queues: readonly string[]): Promise<SweepSignal[]> {
    return this.upkeep.sweepSignals(queues);
  }
  probeDependencyWaits(opts: { queue?: string; limit?: number } = {}): Promise<ProbeOutcome> {
    return this.upkeep.probeDependencyWaits(opts);
  }
  repairWaits(queue: string): Promise<number> {
    return this.upkeep.repairWaits(queue);
  }
  purge(opts: { olderThanMs: number; limit?: number; queue?: string }): Promise<number> {
    return this.upkeep.purge(opts);
  }
  /** @internal */
  forgetWakeMarks(limit = 1000): Promise<number> {
    return this.upkeep.forgetWakeMarks(limit);
  }

  // Rates (rates.ts)
  /** @internal */
  takeRate(
    handle: Pick<LeaseHandle, 'id' | 'queue' | 'leaseToken'>,
    input: { key: string; intervalMs: number },
  ): Promise<RateAnswer> {
    return this.rates.takeRate(handle, input);
  }
  /** @internal */
  reserveRateTurn(input: { queue: string; key: string; intervalMs: number }): Promise<number> {
    return this.rates.reserveRateTurn(input);
  }
  pushRateWindow(input: { queue: string; key: string; afterMs: number }): Promise<void> {
    return this.rates.pushRateWindow(input);
  }

  // Fleet: consumers, ownership, fleet-wide counts (fleet.ts)
  liveConsumers(queue?: string): Promise<LiveConsumer[]> {
    return this.fleet.liveConsumers(queue);
  }
  /** @internal */
  consumerBeat(rows: readonly ConsumerRow[], first: boolean): Promise<void> {
    return this.fleet.consumerBeat(rows, first);
  }
  /** @internal */
  consumerGone(name: string): Promise<void> {
    return this.fleet.consumerGone(name);
  }
  activate(opts: { queue: string; deployment: string; expectEpoch?: number }): Promise<Ownership> {
    return this.fleet.activate(opts);
  }
  ownership(queue: string): Promise<Ownership | undefined> {
    return this.fleet.ownership(queue);
  }
  /** @internal */
  countProcessing(queue: string): Promise<number> {
    return this.fleet.countProcessing(queue);
  }
  /** @internal */
  fleetStats(opts: { everyMs: number; leaseMs?: number }): Promise<FleetStats> {
    return this.fleet.fleetStats(opts);
  }
  /** @internal */
  fleetGauges(opts: { holder: string; everyMs: number; leaseMs: number }): Promise<FleetGaugeReading | undefined> {
    return this.fleet.fleetGauges(opts);
  }
  /** @internal */
  releaseFleetGauges(holder: string): Promise<void> {
    return this.fleet.releaseFleetGauges(holder);
  }
}
