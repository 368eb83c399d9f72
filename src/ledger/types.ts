/** Item states (docs/design/states.md). */
export const ITEM_STATES = ['pending', 'processing', 'blocked', 'completed', 'skipped', 'dead', 'cancelled'] as const;
export type ItemState = (typeof ITEM_STATES)[number];
export const TERMINAL_STATES: readonly ItemState[] = ['completed', 'skipped', 'dead', 'cancelled'];

export const QUEUE_CLASSES = ['interactive', 'default', 'bulk'] as const;
export type QueueClass = (typeof QUEUE_CLASSES)[number];

/** Whose concurrency limit admits a keyed item: its queue's (per key) or its type's own (per key and type). */
export type KeyScope = 'queue' | 'type';

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A work item as the ledger holds it. Times come from the ledger's clock. */
export interface WorkItem {
  id: string;
  queue: string;
  type: string;
  /** null: the item is its own lane. */
  lane: string | null;
  laneSeq: number | null;
  /**
   * True while the item is its lane's head (the only one of its lane that may run), or admitted by its concurrency key.
   */
  isHead: boolean;
  /**
   * Its concurrency key: at most the queue's concurrencyLimit items of one key are admitted at once
   * (docs/design/keys.md,
   * Concurrency keys).
   */
  concurrencyKey: string | null;
  /**
   * Whose concurrencyLimit admits it, as decided at its enqueue: its queue's (per key) or its type's own (per key and
   * type); null without a key.
   */
  keyScope: KeyScope | null;
  queueClass: QueueClass;
  priority: number;
  payload: unknown;
  state: ItemState;
  runAfter: Date;
  attempt: number;
  maxAttempts: number;
  leaseOwner: string | null;
  leaseToken: string | null;
  leaseUntil: Date | null;
  epoch: number | null;
  idempotencyKey: string | null;
  dependencyKey: string | null;
  probeAfter: Date | null;
  blockedAt: Date | null;
  blockExpiresAt: Date | null;
  cancelRequested: boolean;
  checkpoint: unknown;
  /** The latest ctx.progress report of the item's runs (a number 0–100 or a small object), or null. */
  progress: unknown;
  /**
   * The head of the coalesced group this item was last claimed in (docs/design/batches-and-steps.md, Coalescing), or
   * null.
   */
  groupHead: string | null;
  result: unknown;
  lastError: string | null;
  failureClass: string | null;
  replayOf: string | null;
  replayedAt: Date | null;
  /**
   * The W3C traceparent of the span that enqueued it (docs/operations/observing.md, Tracing), or null without
   * OpenTelemetry.
   */
  traceparent: string | null;
  createdAt: Date;
  startedAt: Date | null;
  terminalAt: Date | null;
  updatedAt: Date;
  /** The workflow it is a job of (docs/design/workflows.md); absent outside workflows. */
  workflowId?: string;
}

/** An item this caller holds the lease on: the handle every finish takes. */
export interface ClaimedItem extends WorkItem {
  state: 'processing';
  leaseToken: string;
  leaseOwner: string;
  leaseUntil: Date;
  /**
   * The later items of its lane claimed with it under the same lease (coalescing): every finish ends them with it.
   */
  group?: CoalescedGroup;
  /**
   * A `settled` head that took no members: the payloads of its lane's items of its type that ended
   * unsettled since its last completed one, in lane order (a group's are in `group.payloads`).
   */
  unsettled?: unknown[];
  /**
   * The stages this attempt timed (ctx.stage), set at its first: the write that ends the attempt
   * records them in the item's attempt history. Absent when the handler named none.
   */
  stages?: StageTiming[];
}

/** One stage a run timed (ctx.stage): its name and how long it took (ms). */
export interface StageTiming {
  name: string;
  ms: number;
}

/** How a coalescing type's pending items are handed to its handler (docs/design/batches-and-steps.md, Coalescing). */
export type CoalesceMode = 'latest' | 'all' | 'settled';

/** The items a lane head was claimed with: its lane's next pending items of its type, in lane order. */
export interface CoalescedGroup {
  /** The members' ids in lane order (the head not included). */
  ids: string[];
  /** The lane sequence of the last member: the lane is handed on from there. */
  lastSeq: number;
  /** The newest payload (the last member's). */
  newest: unknown;
  /**
   * `all`: the head's and every member's payload in lane order; `settled`: preceded by those of the lane's items of the
   * type that ended unsettled since its last completed one.
   */
  payloads?: unknown[];
}

/** A durable step an item finished (ctx.step): done once per item, its result returned to every later attempt. */
export interface StepRecord {
  name: string;
  /** The attempt that ran it. */
  attempt: number;
  result: unknown;
  doneAt: Date;
}

export interface AttemptRecord {
  itemId: string;
  attempt: number;
  /** `repaired`: an operator's repair in place (Ledger.repair); `error` holds its reason, `worker` its actor. */
  outcome:
    | 'completed'
    | 'retried'
    | 'dead'
    | 'released'
    | 'skipped'
    | 'blocked'
    | 'lease_expired'
    | 'cancelled'
    | 'repaired';
  failureClass: string | null;
  error: string | null;
  worker: string | null;
  /** The repair's id, on a `repaired` row; null on every other. */
  repairId: string | null;
  startedAt: Date | null;
  endedAt: Date;
  /** The stages the attempt timed (ctx.stage), a repeated name summed; absent when it timed none. */
  stages?: StageTiming[];
}

/** What Ledger.repair did: the item is pending again, as itself. */
export interface RepairResult {
  id: string;
  /** The repair's id: its row in the item's history. */
  repairId: string;
  /**
   * True when this repair id had already repaired the item (a call repeated after its answer was lost): nothing new was
   * written.
   */
  duplicate: boolean;
  /**
   * Whether the item is its lane's (or key's) head now, and so claimable at once; false: it waits its turn behind an
   * earlier item.
   */
  isHead: boolean;
}

export interface EnqueueResult {
  id: string;
  /**
   * True when an item with the same idempotency key and the same request already existed; `id` is that item's. (A
   * different request under the key throws IdempotencyConflictError.)
   */
  duplicate: boolean;
  laneSeq: number | null;
}

// What the ledger's operations take and return.

/** What a finish needs of the claim it ends. */
export type LeaseHandle = Pick<
  ClaimedItem,
  | 'id'
  | 'queue'
  | 'type'
  | 'lane'
  | 'laneSeq'
  | 'concurrencyKey'
  | 'keyScope'
  | 'leaseToken'
  | 'leaseOwner'
  | 'attempt'
  | 'maxAttempts'
  | 'startedAt'
  | 'group'
  | 'stages'
  | 'workflowId'
> &
  EpochFence;

/**
 * The ownership epoch a lease was claimed under (a ClaimedItem's `epoch`).
 * When set, every write that ends or records the item's work checks, in its
 * own statement, that it is still the queue's epoch, and fails with
 * OwnershipLostError otherwise (docs/design/supervisor.md, Ownership epochs). Null or
 * absent: the claim was not fenced, and the writes carry no check.
 */
export interface EpochFence {
  epoch?: number | null | undefined;
}

/**
 * A handle a held item's own writes (checkpoint, progress) are fenced by: its token, and its ownership epoch (with its
 * queue) if it was claimed under one.
 */
export type HeldItem = Pick<LeaseHandle, 'id' | 'leaseToken'> & EpochFence & { queue?: string | undefined };

export interface FinalizeResult {
  /** False: this holder had lost the item (stale token, expired and reclaimed, wrong state); nothing was written. */
  won: boolean;
  /** The state this finish wrote (meaningful when won). */
  state: ItemState;
  /**
   * The failure class recorded when it made the item dead or retried it (`permanent`, `error`, `invalid_payload`, … or
   * a handler's own).
   */
  failureClass?: string;
  /**
   * Not won because the queue's ownership epoch moved on (a batch's entry; a single write throws OwnershipLostError
   * instead).
   */
  ownershipLost?: true;
  /**
   * A laned item's lane got a new head in the same transaction, left pending
   * for a claim. False when the lane had nothing left waiting or its new head
   * was claimed with the completion; undefined when this path does not tell.
   */
  laneAdvanced?: boolean;
  /**
   * A keyed laneless item's key admitted a waiting item in the same
   * transaction and left it pending for a claim. False when it admitted
   * none, or claimed all it admitted with the completion (key affinity);
   * undefined when this path does not tell.
   */
  keyAdmitted?: boolean;
}

/** What a lease renewal found. */
export interface RenewOutcome {
  renewed: boolean;
  /** An operator asked to cancel this item; the handler should stop. */
  cancelRequested: boolean;
}

/** What a claim took. */
export interface ClaimOutcome {
  items: ClaimedItem[];
  /** More claimable heads were seen than this claim took: worth waking another consumer. */
  moreAvailable: boolean;
}

/**
 * Lane affinity (docs/design/consumer.md): the completing consumer takes up to `max` of
 * the new heads in the same transaction, under this lease, if they are due
 * and of its classes and types. Their lanes never wait for a claim round.
 */
export interface SuccessorClaim {
  owner: string;
  token: string;
  leaseMs: number;
  max: number;
  classes?: readonly QueueClass[] | undefined;
  types?: readonly string[] | undefined;
}

/** What a cancel request did. */
export type CancelOutcome =
  /** It was waiting (pending or blocked): now terminal, its lane moves on. */
  | 'cancelled'
  /** It is running: its holder is told (over the control stream, or at its next renewal) and its handler is aborted. */
  | 'cancel_requested'
  /** Already finished (or no such item). */
  | 'not_cancellable'
  | 'not_found';

/**
 * A count read from a bounded index range (src/ledger/sql/operator/stats.ts): with
 * `atLeast` false, exactly `count`; with `atLeast` true, the range reached its
 * cap and holds `count` or more. An object, not a number, so that a floor is
 * never added or compared as if it were exact: read `atLeast` first.
 */
export interface BoundedCount {
  readonly count: number;
  readonly atLeast: boolean;
}

/** Item counts by state, and the claim backlog's age, of one queue. */
export interface QueueStats {
  queue: string;
  /**
   * Items by state, each counted up to a cap (100,000 unfinished, 10,000 terminal: src/ledger/sql/operator/stats.ts).
   */
  counts: Record<ItemState, BoundedCount>;
  /** Age of the oldest due lane head waiting to be claimed, in ms (0 when none waits). */
  oldestDueAgeMs: number;
  /** Of the pending items, those not due yet (a future run after), counted up to the same cap: the rest are due. */
  scheduled: BoundedCount;
}

/** A queue's limits per concurrency key as the ledger holds them (docs/design/keys.md, Concurrency keys). */
export interface ConcurrencyLimits {
  queue: string;
  /** The queue's limit per key; null: none. */
  limit: number | null;
  /** Each type's own limit per key, by type (types without one are absent). */
  types: Record<string, number>;
}

/**
 * A queue's settings held by the ledger for the whole fleet (Ledger.updateQueue; docs/design/supervisor.md,
 * "Queue settings in the ledger"). Each changes live, on every worker, within one reconcile interval; a value a
 * worker's own config sets is pinned there and wins. Left out: unchanged; null: cleared.
 */
export interface QueueSettings {
  /** Executor slots of each worker's consumer (1-1000); null: each worker's own, else 10. */
  slots?: number | null;
  /** Fleet-wide cap on the queue's processing items (1-1,000,000); null: none. */
  maxProcessing?: number | null;
  /** Items of one concurrency key admitted at once (1-100,000), fleet-wide; null: no limit. */
  concurrencyLimit?: number | null;
  /** Paused: its consumers claim nothing (Ledger.pause). */
  paused?: boolean;
}

/** Which deployment holds a queue, under which epoch (docs/design/supervisor.md, Ownership epochs). */
export interface Ownership {
  queue: string;
  deployment: string;
  epoch: number;
  activatedAt: Date;
}

/** A running consumer as its last heartbeat recorded it (docs/design/supervisor.md, "Live consumers"). */
export interface LiveConsumer {
  name: string;
  queue: string;
  classes: QueueClass[];
  /** The types it claims; null: every type. */
  types: string[] | null;
  concurrency: number;
  maxProcessing: number | null;
  epoch: number | null;
  version: string;
  /**
   * Why it claims only rescued work, as of its last heartbeat: its queue's flag (`queue`), its
   * own option (`consumer`), its pool saturated (`pool`), its claims slow (`slow`); null: as usual.
   */
  staleOnly: string | null;
  startedAt: Date;
  lastSeen: Date;
}

/**
 * A rate-limited start's answer (docs/design/consumer.md, "Rate limits"): granted;
 * or not yet: the key's next start is `waitMs` away, `queued` says refused
 * items hold turns, and the item has been due for `dueForMs` (an item back
 * for its turn, just due); or the item is no longer held.
 */
export type RateAnswer =
  | { granted: true }
  | { granted: false; waitMs: number; queued: boolean; dueForMs: number }
  | { granted: false; lost: true };

/** The reason a rate limit's refusal, or a handler's RateLimitedError, releases an item with: explain reads it back. */
export const RATE_LIMITED_REASON = 'rate limited';
