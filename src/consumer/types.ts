import type { Transaction } from 'kysely';
import type { z } from 'zod';
import type { CoalesceMode, EnqueueResult } from '../ledger/types.js';
import type { EnqueueInput } from '../ledger/inputs.js';
import type { DependencyPage, WorkflowInput, WorkflowResult } from '../ledger/workflow-types.js';
import type { StandardSchemaV1 } from '../jobs/standard-schema.js';

/** What a handler sees of its item. */
export interface Job<P = unknown> {
  id: string;
  queue: string;
  type: string;
  lane: string | null;
  laneSeq: number | null;
  payload: P;
  /** 1 on the first attempt. */
  attempt: number;
  maxAttempts: number;
  /** What a previous attempt saved with ctx.checkpoint, or null. */
  checkpoint: unknown;
  /**
   * Hand `fence` to an external system that must reject a stale holder: the
   * token is this claim's, `attempt` grows with every claim of the item.
   */
  fence: { token: string; epoch: number | null; attempt: number };
  enqueuedAt: Date;
  /**
   * Every run of a coalescing type (`coalesce` in defineHandler), a group of
   * one included: the group's items in lane order (this head first) and how
   * many; with `all` or `settled` also their payloads (`settled`: the lane's
   * unsettled ones first). `payload` is the newest. Undefined for a type that
   * does not coalesce; a definition with `coalesce` types it as always there.
   */
  coalesced?: CoalescedView<P>;
}

/** What a coalescing run sees of its group (`job.coalesced`). */
export interface CoalescedView<P = unknown> {
  /** Every item of the group in lane order, the claimed head first. */
  ids: string[];
  count: number;
  /**
   * `all` and `settled`: the payloads the handler is given, in lane order (`settled` begins with the lane's unsettled
   * ones).
   */
  payloads?: P[];
}

/** The job of a coalescing type's run: `coalesced` always there, with `payloads` for `all` and `settled`. */
export type CoalescedJob<P, M extends CoalesceMode = CoalesceMode> = Job<P> & {
  coalesced: [M] extends ['all' | 'settled'] ? CoalescedView<P> & { payloads: P[] } : CoalescedView<P>;
};

export interface JobContext<DB = Record<string, never>> {
  /**
   * Aborted when the lease is lost, the deadline passes, a cancel is
   * requested, or the consumer shuts down; `signal.reason` is then a
   * JobAbortedError naming which. Stop by throwing it
   * (`ctx.signal.throwIfAborted()`): the item ends by that reason. Once the
   * signal has aborted the item is never recorded as completed, even if the
   * handler returns (that is logged at warn), unless ctx.transaction committed.
   */
  signal: AbortSignal;
  /**
   * Runs `fn` in a ledger transaction that also commits this item's
   * completion (with `fn`'s return value as result): the writes inside happen
   * exactly once or not at all. After it returns, the item is completed and
   * the handler's own return value is ignored. Throws LeaseLostError when
   * this run no longer holds the item, OwnershipLostError when its queue was
   * activated for another ownership epoch since the claim; nothing commits.
   */
  transaction<T>(fn: (trx: Transaction<DB>) => Promise<T>): Promise<T>;
  /**
   * The transactional outbox (docs/design/handlers.md, "Follow-up work: the
   * outbox"): enqueues follow-up items inside the running ctx.transaction, so
   * they commit with the handler's writes and this item's completion, or not
   * at all; their wake-ups go out after the commit. Call it only inside
   * ctx.transaction's fn (it throws elsewhere: an enqueue apart from the
   * completion could be made twice, or without the item completing).
   */
  enqueue(input: EnqueueInput): Promise<EnqueueResult>;
  /** ctx.enqueue of several items, in one round trip; results in input order. */
  enqueueMany(inputs: readonly EnqueueInput[]): Promise<EnqueueResult[]>;
  /**
   * Fan-out (docs/design/workflows.md): adds a workflow inside the running ctx.transaction, so its jobs commit with
   * the handler's writes and this item's completion, exactly once, or not at all. Throws outside ctx.transaction.
   */
  workflow(input: WorkflowInput): Promise<WorkflowResult>;
  /**
   * Fan-in: this job's dependencies in its workflow (name, id, end state, result or error), one page at a time
   * (`next` is the `after` of the next page; null on the last). Empty outside a workflow.
   */
  dependencies(page?: { after?: string | null; limit?: number }): Promise<DependencyPage>;
  /**
   * Saves progress; the next attempt sees it as job.checkpoint. False if the lease was lost; OwnershipLostError if the
   * queue's ownership epoch moved on.
   */
  checkpoint(value: unknown): Promise<boolean>;
  /** Renews the lease now (renewal is automatic anyway). */
  heartbeat(): Promise<boolean>;
  /**
   * Reports how far along the run is: a number from 0 to 100, or a small
   * JSON object (at most 4 KB). Kept in memory and stored on the item at
   * most once a second (the newest report wins) and before its outcome;
   * `inspect`, the admin API and the metrics show it. Throws a
   * ValidationError naming `progress` for anything else.
   */
  progress(value: number | Record<string, unknown>): void;
  /**
   * A durable step: runs `fn` once per item. Its result (JSON, under the
   * ledger's result cap) is recorded under this run's lease; every later
   * attempt of the item gets the recorded result back without running `fn`.
   * A throwing `fn` records nothing. Names are unique per item (1–255 characters).
   * Throws LeaseLostError when this run no longer holds the item
   * (OwnershipLostError when its queue's ownership epoch moved on).
   */
  step<T>(name: string, fn: () => Promise<T>): Promise<T>;
  /**
   * A durable step whose database writes commit with its record: `fn(trx)`
   * runs in a ledger transaction that also records the step, so the writes
   * happen exactly once per item, or not at all.
   */
  step<T>(name: string, fn: (trx: Transaction<DB>) => Promise<T>, options: { transaction: true }): Promise<T>;
  /**
   * Ends the item `skipped` with `reason` (throws a SkipError; the same as
   * `throw new SkipError(reason)`): nothing to do — a filter that does not
   * match, an inactive source. Inside ctx.transaction, the transaction rolls
   * back with it; after ctx.transaction committed, the item stays completed.
   */
  skip(reason?: string): never;
  /**
   * Runs `fn` as a named stage of this run (1–64 characters of
   * [A-Za-z0-9_.:-]) and records how long it took: in the histogram
   * `lanewake_stage_duration_seconds` per queue, type and stage, as a child
   * span of the attempt's when tracing is on, and in the debug line the run
   * logs when it ends. Returns what `fn` returns; throws what it throws (the
   * stage is recorded either way).
   */
  stage<T>(name: string, fn: () => Promise<T> | T): Promise<T>;
}

export type Handler<P = unknown, DB = Record<string, never>> = (job: Job<P>, ctx: JobContext<DB>) => Promise<unknown>;

export interface HandlerDefinition<P = unknown, DB = Record<string, never>> {
  handle: Handler<P, DB>;
  /** Payloads failing it end dead, class `invalid_payload`, without running the handler. */
  schema?: z.ZodType<P>;
  /** Per-type deadline (ms); 0 = none. Overrides the consumer's. */
  deadlineMs?: number;
  /**
   * Coalescing (docs/design/handlers.md): a claimed lane head of this type takes its
   * lane's next due pending items of this type with it, and the handler runs
   * once for the group, which then ends as one. `latest` hands it the newest
   * payload; `all` every payload in lane order; `settled` those too, preceded
   * by the payloads of the lane's items of this type that ended without
   * completing since its last completed one.
   */
  coalesce?: CoalesceMode;
  /** The most items one group takes besides its head (default 1,000). */
  coalesceMax?: number;
  /**
   * A rate limit per key (docs/design/consumer.md, "Rate limits"): at most `max`
   * starts in any `perMs` window, fleet-wide, held by the ledger. The key is
   * `key(payload)`; with `key: 'concurrencyKey'`, the item's concurrency key
   * (an item without one shares its type's window); with no `key`, the type.
   * Items over it go back to pending until their turn without spending an
   * attempt.
   */
  rateLimit?: RateLimit<P>;
  /**
   * This type's own limit per concurrency key (docs/design/keys.md,
   * Concurrency keys): at most this many of its items with one
   * `concurrencyKey` admitted at once, fleet-wide, counted apart from the
   * queue's `concurrencyLimit` and from other types. Stored in the ledger
   * when the consumer starts (`ledger.setConcurrencyLimit(queue, n, { type })`);
   * it applies to the type's items enqueued from then on.
   */
  concurrencyLimit?: number;
}

export interface RateLimit<P = unknown> {
  key?: ((payload: P) => string) | 'concurrencyKey';
  max: number;
  perMs: number;
}

/**
 * How one item of a batch ended, by its id in the handler's answer (docs/design/batches-and-steps.md, Batch handlers).
 */
export type BatchItemOutcome =
  | { outcome: 'complete'; result?: unknown }
  | { outcome: 'retry'; error: unknown }
  | { outcome: 'dead'; error: unknown; failureClass?: string }
  | { outcome: 'release'; delayMs?: number; reason?: string }
  /** Ends the item `skipped` (as SkipError does); written after a batch's ctx.transaction, not within it. */
  | { outcome: 'skip'; reason?: string };

/** A batch handler's answer: an outcome per item id. An item left out is retried. */
export type BatchOutcomes = Readonly<Record<string, BatchItemOutcome>>;

export interface BatchContext<DB = Record<string, never>> {
  /** Aborted when the batch's items are taken back: the consumer shuts down, or the batch's deadline passed. */
  signal: AbortSignal;
  /**
   * Runs `fn` in one ledger transaction that also completes every item its
   * answer completes, each by its own CAS: `fn`'s writes and those
   * completions commit together, or nothing does (one lost lease rolls all
   * back, and the batch is retried). Its answer is the batch's.
   */
  transaction(fn: (trx: Transaction<DB>) => Promise<BatchOutcomes>): Promise<BatchOutcomes>;
}

export type BatchHandler<P = unknown, DB = Record<string, never>> = (
  jobs: Job<P>[],
  ctx: BatchContext<DB>,
) => Promise<BatchOutcomes>;

export interface BatchOptions {
  /** Items one call takes at most; each takes an executor slot while its batch gathers and runs. */
  max: number;
  /** How long the first item of a batch waits for others before the batch runs anyway. */
  maxWaitMs: number;
}

/** A definition with its payload type erased, so one map can hold handlers of many payload types. */
export interface RegisteredHandler<DB = Record<string, never>> {
  handle: Handler<unknown, DB>;
  /** Any Standard Schema validator (zod 4 is one): payloads failing it end dead, class `invalid_payload`. */
  schema?: StandardSchemaV1;
  deadlineMs?: number;
  coalesce?: CoalesceMode;
  coalesceMax?: number;
  rateLimit?: RateLimit;
  concurrencyLimit?: number;
  /** A batch handler's (defineBatchHandler): its items are gathered into calls of `handle`. */
  batch?: { options: BatchOptions; handle: BatchHandler<unknown, DB> };
}

/**
 * A coalescing type's definition: its handler's job always has `coalesced` (with `payloads` for `all` and `settled`).
 */
export type CoalescingHandlerDefinition<P, DB, M extends CoalesceMode> = Omit<
  HandlerDefinition<P, DB>,
  'handle' | 'coalesce'
> & {
  coalesce: M;
  handle: (job: CoalescedJob<P, M>, ctx: JobContext<DB>) => Promise<unknown>;
};

/** Declares a handler with a payload schema; the payload type flows from the schema to `job.payload`. */
// One overload per mode, not a type parameter for it: a caller that names the payload type
// (`defineHandler<P>`) leaves no type parameter to infer the mode into.
export function defineHandler<P, DB = Record<string, never>>(
  def: CoalescingHandlerDefinition<P, DB, 'all'>,
): RegisteredHandler<DB>;
export function defineHandler<P, DB = Record<string, never>>(
  def: CoalescingHandlerDefinition<P, DB, 'settled'>,
): RegisteredHandler<DB>;
export function defineHandler<P, DB = Record<string, never>>(
  def: CoalescingHandlerDefinition<P, DB, 'latest'>,
): RegisteredHandler<DB>;
export function defineHandler<P, DB = Record<string, never>>(def: HandlerDefinition<P, DB>): RegisteredHandler<DB>;
export function defineHandler<DB>(def: object): RegisteredHandler<DB> {
  return def as unknown as RegisteredHandler<DB>;
}

/**
 * A handler function, or a definition from `defineHandler`. A plain function's payload was checked by
 * nothing, so it says its own type (`job: Job<{ repo: string }>`, or any part of a Job); left out,
 * `job.payload` is `never`. `never` is what lets every such annotation fit without `any`; for a
 * checked payload give the type a schema (`defineHandler`, `defineJobs`).
 */
export type HandlerEntry<DB = Record<string, never>> = Handler<never, DB> | RegisteredHandler<DB>;

export function normalizeHandler<DB>(entry: HandlerEntry<DB>): RegisteredHandler<DB> {
  return typeof entry === 'function' ? { handle: entry as unknown as Handler<unknown, DB> } : entry;
}
