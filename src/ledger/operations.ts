import type { Transaction } from 'kysely';
import type { LedgerCapabilities } from './capabilities.js';
import type { Executor } from './connection.js';
import type { ClaimAtInsert } from './enqueue-items.js';
import type { FleetGaugeReading, FleetStats } from './fleet-stats.js';
import type { ClaimCandidate, ClaimInput, EnqueueInput, EnqueueOptions, ReleaseInput, RetryInput } from './inputs.js';
import type { MigrateResult, SchemaStatus } from './migrations.js';
import type { ConsumerRow } from './sql/fleet/consumers.js';
import type { QueueRow } from './sql/queues/drain.js';
import type { StepHolder } from './sql/run/steps.js';
import type {
  AttemptRecord,
  QueueSettings,
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

type Trx = Transaction<Record<string, never>>;
type Lease = Pick<LeaseHandle, 'id' | 'leaseToken' | 'group'>;
type Done = { handle: LeaseHandle; result?: unknown };

/**
 * Every operation of the ledger, grouped by what it acts on: the whole SQL surface on one screen. `Ledger`
 * implements it; a consumer's port (src/consumer/ledger-port.ts) picks its part. Longer notes are on the
 * implementations (core.ts, ledger.ts, leases.ts, finishing.ts, items.ts, queues.ts, rates.ts, fleet.ts, upkeep.ts).
 */
export interface LedgerOperations {
  // Schema and server
  /** Creates or upgrades the ledger's tables (idempotent); `createDatabase` creates the URL's database first. */
  migrate(opts?: { createDatabase?: boolean }): Promise<MigrateResult>;
  /** The schema version the database holds against the one this code needs. */
  schemaStatus(): Promise<SchemaStatus>;
  /** Throws unless the database's schema is the one this code needs. */
  assertSchemaCurrent(): Promise<void>;
  /** What the server and this ledger's connections can do, asked once. */
  capabilities(): Promise<LedgerCapabilities>;
  /** The ledger's clock. */
  now(): Promise<Date>;
  /** Closes the ledger's connections. */
  close(): Promise<void>;

  // Item: enqueue
  /** Inserts one item (or answers the one its idempotency key names). */
  enqueue(input: EnqueueInput, opts?: EnqueueOptions): Promise<EnqueueResult>;
  /** Inserts many items in a few statements; results in input order. */
  enqueueMany(inputs: readonly EnqueueInput[], opts?: EnqueueOptions): Promise<EnqueueResult[]>;
  /** enqueueMany, with up to `reserve`'s answer of the items inserted claimed under its lease. @internal */
  enqueueClaiming(
    inputs: readonly EnqueueInput[],
    reserve: (eligible: readonly ClaimCandidate[]) => ClaimAtInsert | undefined,
  ): Promise<{ results: EnqueueResult[]; claimed: ClaimedItem[] }>;
  /** Throws the ValidationError `enqueue(input)` would, writing nothing. @internal */
  checkEnqueue(input: EnqueueInput): void;

  // Item: claim
  /** Claims up to `limit` due lane heads with a fresh lease. */
  claim(input: ClaimInput): Promise<ClaimOutcome>;
  /** Claims exactly these items if each is still a due pending head. @internal */
  claimByIds(input: Omit<ClaimInput, 'limit' | 'classes'> & { ids: string[] }): Promise<ClaimedItem[]>;
  /** The items of a queue held under one lease token now (a lost handoff recovered). @internal */
  heldUnderLease(spec: {
    queue: string;
    classes: readonly QueueClass[];
    owner: string;
    token: string;
    leaseMs: number;
  }): Promise<ClaimedItem[]>;

  // Lease: what its holder writes while the item runs
  /** Renews one lease. */
  renew(handle: Lease, leaseMs: number): Promise<RenewOutcome>;
  /** Renews many leases in one statement; per handle, held or not and cancel requested or not. */
  renewMany(handles: readonly Lease[], leaseMs: number): Promise<RenewOutcome[]>;
  /** Stores the item's checkpoint; false when the lease is no longer held. */
  checkpoint(handle: HeldItem, value: unknown): Promise<boolean>;
  /** Stores the latest progress report of each held item in one statement. @internal */
  saveProgress(reports: readonly { handle: HeldItem; progress: unknown }[]): Promise<void>;
  /** Records a durable step and its result, fenced by the holder's token. @internal */
  recordStep(handle: StepHolder, name: string, value: unknown): Promise<void>;
  /** Records a durable step in one transaction with `fn`'s writes. @internal */
  recordStepWithin<T>(handle: StepHolder, name: string, fn: (trx: Trx) => Promise<T>): Promise<T>;

  // Attempt: how a claimed attempt finishes
  /** Completes the attempt with its result. */
  complete(handle: LeaseHandle, result?: unknown): Promise<FinalizeResult>;
  /** Completes many attempts in one transaction, each a CAS on its own lease. */
  completeMany(entries: readonly Done[]): Promise<FinalizeResult[]>;
  /** completeMany, claiming the next heads its completions make under `next`'s lease. @internal */
  completeManyClaimingNext(
    entries: readonly Done[],
    next?: SuccessorClaim | readonly SuccessorClaim[],
  ): Promise<{ results: FinalizeResult[]; claimed: ClaimedItem[] }>;
  /** `fn` and the item's completion in one ledger transaction (ctx.transaction). @internal */
  completeWithin<T>(
    handle: LeaseHandle,
    fn: (trx: Trx) => Promise<T>,
  ): Promise<{ value: T; laneAdvanced: boolean | undefined }>;
  /** `fn` and the completions of a batch's items in one ledger transaction. @internal */
  completeManyWithin<T>(
    handles: readonly LeaseHandle[],
    fn: (trx: Trx) => Promise<T>,
    completions: (value: T) => readonly { id: string; result: unknown }[],
  ): Promise<{ value: T; completed: Map<string, boolean | undefined> }>;
  /** Completes inside the caller's transaction on this ledger's database. */
  completeInTransaction(trx: Executor, handle: LeaseHandle, result?: unknown): Promise<void>;
  /** A failed attempt: pending after the backoff, or dead once the budget is spent. */
  retry(handle: LeaseHandle, input: RetryInput): Promise<FinalizeResult & { delayMs: number }>;
  /** A permanent failure: dead at once. */
  fail(handle: LeaseHandle, input: { error: unknown; failureClass?: string }): Promise<FinalizeResult>;
  /** Gives the item back without spending an attempt; answers the delay it wrote. */
  release(handle: LeaseHandle, input?: ReleaseInput): Promise<FinalizeResult & { delayMs: number }>;
  /** Ends the item `skipped`, its reason stored as its result. */
  skip(handle: LeaseHandle, reason?: unknown): Promise<FinalizeResult>;
  /** Ends the item `cancelled`, as its cancel was requested while it ran. */
  cancelClaimed(handle: LeaseHandle, reason?: string): Promise<FinalizeResult>;
  /** Parks the item and its lane until its dependency key is woken or a probe. */
  block(
    handle: LeaseHandle,
    input: { dependencyKey: string; maxWaitMs: number; probeAfterMs?: number; reason?: string },
  ): Promise<FinalizeResult>;

  // Item: by id
  /** One item. */
  get(id: string): Promise<WorkItem | undefined>;
  /** Dead items, newest first. */
  listDead(opts?: { queue?: string; limit?: number }): Promise<WorkItem[]>;
  /** The durable steps an item has done, in order. */
  steps(id: string): Promise<StepRecord[]>;
  /** An item, its attempt history and its durable steps. */
  inspect(id: string): Promise<{ item: WorkItem; attempts: AttemptRecord[]; steps: StepRecord[] } | undefined>;
  /** Why an item is where it is: a reason code, a sentence and its facts. */
  explain(id: string): Promise<Explanation | undefined>;
  /** Cancels a waiting item, or requests the cancel of a running one. */
  cancel(id: string, reason?: string): Promise<CancelOutcome>;
  /** Re-drives a dead or cancelled item as a new item, guarded by what the operator saw. */
  replay(id: string, guard: { expectAttempt: number; expectErrorDigest: string }): Promise<{ id: string }>;
  /** Repairs a dead or cancelled item in place, guarded by what the operator saw. */
  repair(
    id: string,
    opts: { expectAttempt: number; expectErrorDigest: string; reason: string; actor: string; repairId?: string },
  ): Promise<RepairResult>;

  // Dependency
  /** Wakes the items blocked on `key`. */
  wakeDependency(key: string, opts?: { queue?: string }): Promise<WokenItem[]>;
  /** Blocked items whose probe time has come back to pending, to be checked again. */
  probeDependencyWaits(opts?: { queue?: string; limit?: number }): Promise<ProbeOutcome>;
  /** Records the missing waits rows of a queue's blocked items; returns how many. */
  repairWaits(queue: string): Promise<number>;
  /** Forgets dependency wake marks untouched for a day. @internal */
  forgetWakeMarks(limit?: number): Promise<number>;

  // Queue
  /** Depth by state per queue, from bounded index ranges. */
  stats(queue?: string): Promise<QueueStats[]>;
  /** How many items of the queue are processing across the fleet. @internal */
  countProcessing(queue: string): Promise<number>;
  /** Per queue, whether a claim, reclaim or probe would find work now. */
  sweepSignals(queues: readonly string[]): Promise<SweepSignal[]>;
  /** Takes back items whose lease expired. */
  reclaimExpired(opts?: { queue?: string; limit?: number }): Promise<ReclaimOutcome>;
  /** Deletes terminal items older than `olderThanMs`; returns how many. */
  purge(opts: { olderThanMs: number; limit?: number; queue?: string }): Promise<number>;
  /** Sets the limit per concurrency key of a queue, or of one type in it. */
  setConcurrencyLimit(queue: string, limit: number | null, options?: { type?: string }): Promise<number>;
  /** The queue's limit per concurrency key and its types' own. */
  concurrencyLimits(queue: string): Promise<ConcurrencyLimits>;
  /** Serves a queue's concurrency keys in turn (`'key'`) or oldest first (`null`). */
  setFairness(queue: string, fairness: 'key' | null): Promise<void>;
  /** Pauses a queue: its consumers claim nothing until resume. */
  pause(queue: string): Promise<void>;
  /** Resumes a paused queue. */
  resume(queue: string): Promise<void>;
  /** Which of these queues are paused. */
  pausedQueues(queues: readonly string[]): Promise<Set<string>>;
  /** Sets a queue to claim only items whose lease expired, or back. */
  setStaleOnly(queue: string, on: boolean): Promise<void>;
  /** Which of these queues are stale-only. */
  staleOnlyQueues(queues: readonly string[]): Promise<Set<string>>;
  /** Sets a queue drain-only (enqueues refused, what it holds finishes), or back. */
  setDrainOnly(queue: string, on: boolean): Promise<void>;
  /** Which of these queues are drain-only. */
  drainOnlyQueues(queues: readonly string[]): Promise<Set<string>>;
  /** Defines a queue (its row) before its first item, with settings; whether it was new. */
  createQueue(queue: string, settings?: QueueSettings): Promise<boolean>;
  /** Changes a queue's settings; every worker applies them within a reconcile interval. */
  updateQueue(queue: string, settings: QueueSettings): Promise<void>;
  /** Every queue the ledger holds (or those of `queues`), with its flags, settings and incarnation. */
  queueRows(queues?: readonly string[]): Promise<QueueRow[]>;
  /** Deletes an empty drain-only queue with its rows. */
  deleteQueue(queue: string): Promise<{ items: number }>;

  // Rate
  /** A rate-limited item's start: granted, or how long until it may. @internal */
  takeRate(
    handle: Pick<LeaseHandle, 'id' | 'queue' | 'leaseToken'>,
    input: { key: string; intervalMs: number },
  ): Promise<RateAnswer>;
  /** A turn for an item refused a rate-limited start: how long from now (ms). @internal */
  reserveRateTurn(input: { queue: string; key: string; intervalMs: number }): Promise<number>;
  /** Pushes a key's next start to `afterMs` from now at the soonest. */
  pushRateWindow(input: { queue: string; key: string; afterMs: number }): Promise<void>;

  // Consumer
  /** The consumers whose heartbeat is recent, of one queue or all. */
  liveConsumers(queue?: string): Promise<LiveConsumer[]>;
  /** The heartbeat of a process's running consumers, one statement for all. @internal */
  consumerBeat(rows: readonly ConsumerRow[], first: boolean): Promise<void>;
  /** A stopped consumer's row removed. @internal */
  consumerGone(name: string): Promise<void>;

  // Ownership
  /** Hands a queue to a deployment under the next epoch (a CAS with `expectEpoch`). */
  activate(opts: { queue: string; deployment: string; expectEpoch?: number }): Promise<Ownership>;
  /** A queue's ownership now. */
  ownership(queue: string): Promise<Ownership | undefined>;

  // Fleet
  /** The fleet's stats as last counted, counted here when stale and this replica takes the task. @internal */
  fleetStats(opts: { everyMs: number; leaseMs?: number }): Promise<FleetStats>;
  /** The fleet-wide gauges while `holder` holds their lease; undefined when another replica does. @internal */
  fleetGauges(opts: { holder: string; everyMs: number; leaseMs: number }): Promise<FleetGaugeReading | undefined>;
  /** Gives up `holder`'s lease on the fleet-wide gauges. @internal */
  releaseFleetGauges(holder: string): Promise<void>;
}
