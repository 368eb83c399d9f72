import { sql, type Transaction } from 'kysely';
import { z } from 'zod';
import { TransactionRolledBackError, ValidationError } from '../errors.js';
import { backoffDelayMs, backoffSchema, DEFAULT_BACKOFF, type BackoffInput } from './backoff.js';
import { parseLedgerConfig, type LedgerConfig, type LedgerConfigInput } from './config.js';
import { createLedgerPool, ledgerDbOnPool, trackPool, type Executor, type LedgerDb, type PoolStats } from './connection.js';
import { assertSchemaCurrent, migrate, schemaStatus, type MigrateResult, type SchemaStatus } from './migrations.js';
import { ER_DUP_ENTRY, errno, retryOnConflict, runTransaction } from './retry.js';
import { finalizeBlock } from './sql/block.js';
import { cancelItem } from './sql/cancel.js';
import { claimByIds, claimHeads } from './sql/claim.js';
import { ownerColumn, queueScoped, truncate } from './sql/common.js';
import { completeMany, completionsSettled } from './sql/complete-batch.js';
import { probeDependencyWaits, wakeDependency } from './sql/dependency.js';
import { claimableAtInsert, claimedAtInsert, fitsOneStatement, insertItems, insertLanedPipelined, type InsertClaim, type NewItem } from './sql/enqueue.js';
import { finalize, finalizeInTx, type Finalization } from './sql/finalize.js';
import { renewLease, saveCheckpoint } from './sql/lease.js';
import { getAttempts, getItem, listDead } from './sql/inspect.js';
import { activateOwnership, getOwnership } from './sql/ownership.js';
import { purgeTerminal } from './sql/purge.js';
import { purgeWakeMarks } from './sql/wake-marks.js';
import { reclaimExpired } from './sql/reclaim.js';
import { repairWaits } from './sql/waits.js';
import { replayItem } from './sql/replay.js';
import { countProcessing, queueStats } from './sql/stats.js';
import { ledgerTables, type LedgerTables } from './tables.js';
import type {
  AttemptRecord,
  CancelOutcome,
  ClaimedItem,
  ClaimOutcome,
  EnqueueResult,
  ItemState,
  LeaseHandle,
  Ownership,
  ProbeOutcome,
  QueueClass,
  QueueStats,
  ReclaimOutcome,
  RenewOutcome,
  SuccessorClaim,
  WokenItem,
  WorkItem,
} from './types.js';
import {
  durationMs,
  encodeJson,
  encodePayload,
  enqueueItemFieldsSchema,
  itemId,
  keyString,
  positiveDurationMs,
  queueClass,
  queueName,
  reasonText,
  typeName,
  validate,
  workerName,
} from './validation.js';

export interface EnqueueInput {
  queue: string;
  type: string;
  payload: unknown;
  /** Ordering key: items of one lane run one at a time, in enqueue order. */
  lane?: string;
  /** Smaller runs first among claimable heads. Default 0. */
  priority?: number;
  queueClass?: QueueClass;
  /** Attempt budget. Default 25. */
  maxAttempts?: number;
  /** Not claimable before this instant. */
  runAt?: Date;
  /** Not claimable before the ledger's now + delayMs. */
  delayMs?: number;
  /** Unique per queue: a second enqueue returns the first item with `duplicate: true`. */
  idempotencyKey?: string;
}

/** An item that may be inserted already claimed, as `enqueueClaiming`'s caller sees it. */
export interface ClaimCandidate {
  queue: string;
  type: string;
  queueClass: QueueClass;
}

export interface EnqueueOptions {
  /**
   * Run inside the caller's transaction (a Kysely `Transaction` on the same
   * database): the items commit or roll back with the caller's own writes.
   */
  transaction?: Executor;
}

export interface ClaimInput {
  queue: string;
  /** Who claims: a stable consumer name, recorded as the lease owner. */
  owner: string;
  limit: number;
  leaseMs: number;
  classes?: QueueClass[];
  types?: string[];
  epoch?: number;
}

export interface FinalizeResult {
  /** False: this holder had lost the item (stale token, expired and reclaimed, wrong state); nothing was written. */
  won: boolean;
  /** The state this finalize wrote (meaningful when won). */
  state: ItemState;
  /**
   * A laned item's lane got a new head in the same transaction, left pending
   * for a claim. False when the lane had nothing left waiting or its new head
   * was claimed with the completion; undefined when this path does not tell.
   */
  laneAdvanced?: boolean;
}

export interface RetryInput {
  error: unknown;
  failureClass?: string;
  backoff?: BackoffInput;
  /** Exact delay; overrides the backoff policy. */
  delayMs?: number;
}

export const DEFAULT_MAX_ATTEMPTS = 25;

/** Dependency wake marks are kept at least this long (see sql/wake-marks.ts). */
const WAKE_MARK_KEEP_MS = 86_400_000;

/** The most items one claim (or claim by ids) takes. */
export const MAX_CLAIM_ITEMS = 1000;

const claimSchema = z
  .object({
    queue: queueName,
    owner: workerName,
    limit: z.number().int().min(1).max(MAX_CLAIM_ITEMS),
    leaseMs: positiveDurationMs,
    classes: z.array(queueClass).min(1, 'give at least one class, or leave it out for all').optional(),
    types: z.array(typeName).min(1, 'give at least one type, or leave it out for all').max(200).optional(),
    epoch: z.number().int().min(0).optional(),
  })
  .strict();
const failureClassSchema = z.string().regex(/^[a-z0-9_.:-]{1,64}$/, 'must be 1-64 chars of [a-z0-9_.:-]');
const retrySchema = z.object({
  error: z.unknown(),
  failureClass: failureClassSchema.optional(),
  backoff: backoffSchema.optional(),
  delayMs: durationMs.optional(),
});
const failSchema = z.object({ error: z.unknown(), failureClass: failureClassSchema.optional() });
const releaseSchema = z.object({ delayMs: durationMs.optional(), reason: reasonText.optional() }).strict();
const limitSchema = z.number().int().min(1).max(100_000);
// Schemas are built once here: zod compiles each on first use, and building
// one per call showed up as the largest allocator on the claim path.
const successorClaimSchema = z
  .object({
    owner: workerName,
    token: z.string().regex(/^[A-Za-z0-9_-]{16,32}$/, 'must be 16-32 chars of [A-Za-z0-9_-]'),
    leaseMs: positiveDurationMs,
    max: z.number().int().min(0).max(MAX_CLAIM_ITEMS),
    classes: z.array(queueClass).optional(),
    types: z.array(typeName).max(200).optional(),
  })
  .strict();
const claimByIdsSchema = claimSchema.omit({ limit: true, classes: true }).extend({ ids: z.array(itemId).max(MAX_CLAIM_ITEMS) });
const wakeDependencySchema = z.object({ key: keyString, queue: queueName.optional() });
const maintenanceSchema = z.object({ queue: queueName.optional(), limit: limitSchema.default(500) });
const replaySchema = z.object({
  id: itemId,
  expectAttempt: z.number().int().min(0),
  expectErrorDigest: z.string().regex(/^[0-9a-f]{64}$/, 'must be a hex SHA-256'),
});
const purgeSchema = z.object({ olderThanMs: durationMs, limit: limitSchema.default(1000), queue: queueName.optional() });
const listDeadSchema = z.object({ queue: queueName.optional(), limit: limitSchema.default(100) });
const activateSchema = z.object({ queue: queueName, deployment: workerName, expectEpoch: z.number().int().min(0).optional() });
const blockSchema = z
  .object({
    dependencyKey: keyString,
    maxWaitMs: positiveDurationMs,
    probeAfterMs: positiveDurationMs.optional(),
    reason: reasonText.optional(),
  })
  .strict();

/** The ledger: every read and write of a work item goes through here (docs/design.md §3, §8). */
export class Ledger {
  readonly config: LedgerConfig;
  readonly db: LedgerDb;
  readonly tables: LedgerTables;
  private readonly itemFields: ReturnType<typeof enqueueItemFieldsSchema>;
  /** Our own pool runs with multipleStatements; a Kysely instance handed in may not. */
  private readonly multiStatement: boolean;

  /** Connection counts of the ledger's own pool (undefined when given a Kysely instance). */
  readonly pool: Readonly<PoolStats> | undefined;

  constructor(config: LedgerConfigInput, db?: LedgerDb) {
    this.config = parseLedgerConfig(config);
    this.multiStatement = db === undefined;
    if (db) {
      this.db = db;
    } else {
      const pool = createLedgerPool(this.config);
      this.pool = trackPool(pool);
      this.db = ledgerDbOnPool(pool);
    }
    this.tables = ledgerTables(this.config.tablePrefix);
    this.itemFields = enqueueItemFieldsSchema();
  }

  migrate(): Promise<MigrateResult> {
    return migrate(this.db, this.config.tablePrefix);
  }

  schemaStatus(): Promise<SchemaStatus> {
    return schemaStatus(this.db, this.config.tablePrefix);
  }

  assertSchemaCurrent(): Promise<void> {
    return assertSchemaCurrent(this.db, this.config.tablePrefix);
  }

  /** The ledger's clock. */
  async now(): Promise<Date> {
    const r = await sql<{ now: Date }>`SELECT NOW(6) AS now`.execute(this.db);
    const now = r.rows[0]?.now;
    if (!now) throw new Error('ledger clock: no answer');
    return now;
  }

  async enqueue(input: EnqueueInput, opts: EnqueueOptions = {}): Promise<EnqueueResult> {
    const [result] = await this.enqueueBatch([input], opts, '');
    if (!result) throw new Error('enqueue: no result');
    return result;
  }

  /** One round trip per batch (a few statements), whatever its size. Results are in input order. */
  enqueueMany(inputs: readonly EnqueueInput[], opts: EnqueueOptions = {}): Promise<EnqueueResult[]> {
    if (!Array.isArray(inputs)) throw new ValidationError([{ field: 'items', message: 'must be an array' }], 'enqueue');
    return this.enqueueBatch(inputs, opts, 'items');
  }

  /**
   * Enqueues like enqueueMany, and lets the caller claim at insert: once the
   * batch is validated, `reserve` sees the items that may be inserted already
   * claimed (due now, no idempotency key; of a lane, only the batch's first
   * item) and may answer a lease; up to `max` of them are then inserted under
   * it (state processing, attempt 1), for a consumer in this process that
   * starts them without a claim round trip. A laned item keeps the lease only
   * if its lane turns out idle, so it is the head: lane order holds. Returns
   * the results in input order and the items inserted claimed.
   */
  async enqueueClaiming(
    inputs: readonly EnqueueInput[],
    reserve: (eligible: readonly ClaimCandidate[]) => (InsertClaim & { max: number }) | undefined,
  ): Promise<{ results: EnqueueResult[]; claimed: ClaimedItem[] }> {
    if (!Array.isArray(inputs)) throw new ValidationError([{ field: 'items', message: 'must be an array' }], 'enqueue');
    const items = this.prepare(inputs, 'items');
    // Of a lane, only the batch's first item can be its head.
    const lanes = new Set<string>();
    const eligible = items.filter((item) => {
      if (!claimableAtInsert(item)) return false;
      if (item.lane === null) return true;
      const key = queueScoped(item.queue, item.lane);
      if (lanes.has(key)) return false;
      lanes.add(key);
      return true;
    });
    const claim = eligible.length > 0 ? reserve(eligible) : undefined;
    if (claim) {
      // The owner folded once for the batch, not once per row.
      const lease: InsertClaim = { owner: ownerColumn(claim.owner), token: claim.token, leaseMs: claim.leaseMs };
      for (const item of eligible.slice(0, claim.max)) item.claim = lease;
    }
    const nowMs = Date.now();
    const results = await this.insertPrepared(items);
    const claimed: ClaimedItem[] = [];
    items.forEach((item, i) => {
      const r = results[i];
      // The insert dropped the claim of a laned item whose lane was busy.
      if (item.claim && r && !r.duplicate) claimed.push(claimedAtInsert(r.id, item, item.claim, nowMs, r.laneSeq));
    });
    return { results, claimed };
  }

  private async enqueueBatch(inputs: readonly EnqueueInput[], opts: EnqueueOptions, prefix: string): Promise<EnqueueResult[]> {
    const items = this.prepare(inputs, prefix);
    if (items.length === 0) return [];
    const caller = opts.transaction;
    if (caller !== undefined) return this.enqueueInCallerTransaction(caller, items);
    return this.insertPrepared(items);
  }

  private async insertPrepared(items: NewItem[]): Promise<EnqueueResult[]> {
    if (items.length === 0) return [];
    if (items.every((i) => i.lane === null) && fitsOneStatement(items)) {
      // No lane bookkeeping: the whole batch is one INSERT (plus a read when it
      // has idempotency keys), atomic without a transaction's extra round trips.
      return retryOnConflict(() => insertItems(this.db, this.tables, items, false), undefined, (e) => errno(e) === ER_DUP_ENTRY);
    }
    if (items.every((i) => i.idempotencyKey === null) && fitsOneStatement(items)) {
      return retryOnConflict(() => insertLanedPipelined(this.db, this.multiStatement, this.tables, items));
    }
    return retryOnConflict(
      () => this.db.transaction().execute((trx) => insertItems(trx, this.tables, items, false)),
      undefined,
      (e) => errno(e) === ER_DUP_ENTRY,
    );
  }

  /**
   * The caller's transaction cannot be retried from here, so the batch runs
   * under a savepoint: an idempotency race (1062) rolls back only this
   * batch's statements, and the batch runs again looking existing keys up
   * outside the caller's transaction (see insertItems), which sees the winner
   * and takes no lock. When the server has rolled the caller's whole
   * transaction back meanwhile (a deadlock, a lost connection), the savepoint
   * went with it: the caller gets TransactionRolledBackError, its cause the
   * server's error, never a complaint about the savepoint.
   */
  private async enqueueInCallerTransaction(trx: Executor, items: NewItem[]): Promise<EnqueueResult[]> {
    for (let round = 0; ; round++) {
      await sql`SAVEPOINT lanewake_enqueue`.execute(trx);
      try {
        const out = await insertItems(trx, this.tables, items, round > 0 ? this.db : false);
        await sql`RELEASE SAVEPOINT lanewake_enqueue`.execute(trx);
        return out;
      } catch (error) {
        try {
          await sql`ROLLBACK TO SAVEPOINT lanewake_enqueue`.execute(trx);
        } catch {
          throw new TransactionRolledBackError(error);
        }
        if (errno(error) !== ER_DUP_ENTRY || round >= 3) throw error;
      }
    }
  }

  private prepare(inputs: readonly EnqueueInput[], prefix: string): NewItem[] {
    const issues: ValidationError['issues'][number][] = [];
    const out: NewItem[] = [];
    inputs.forEach((input, i) => {
      const at = prefix === '' ? '' : `${prefix}[${i}]`;
      const parsed = this.itemFields.safeParse(input);
      if (!parsed.success) issues.push(...ValidationError.fromZod(parsed.error, undefined, at).issues);
      // The payload is checked as enqueueItemSchema checks it, and encoded once for both.
      const isObject = typeof input === 'object' && input !== null && !Array.isArray(input);
      const payload = isObject ? encodePayload((input as { payload?: unknown }).payload, this.config.payloadMaxBytes) : undefined;
      if (payload && 'error' in payload) issues.push({ field: `${at === '' ? 'payload' : `${at}.payload`}${payload.at}`, message: payload.error });
      if (!parsed.success || !payload || 'error' in payload) return;
      const v = parsed.data;
      out.push({
        queue: v.queue,
        type: v.type,
        payloadJson: payload.json,
        lane: v.lane ?? null,
        priority: v.priority ?? 0,
        queueClass: v.queueClass ?? 'default',
        maxAttempts: v.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
        runAt: v.runAt ?? null,
        delayMs: v.delayMs ?? 0,
        idempotencyKey: v.idempotencyKey ?? null,
      });
    });
    if (issues.length > 0) throw new ValidationError(issues, 'enqueue');
    return out;
  }

  /** Claims up to `limit` due lane heads with a fresh lease. */
  claim(input: ClaimInput): Promise<ClaimOutcome> {
    const v = validate(claimSchema, input, 'claim');
    return claimHeads(this.db, this.tables, { ...v, multiStatement: this.multiStatement });
  }

  /**
   * Claims exactly these items if each is still a due pending head (targeted
   * wake-ups); with `types`, only items of those types (a wake-up may name others).
   */
  claimByIds(input: Omit<ClaimInput, 'limit' | 'classes'> & { ids: string[] }): Promise<ClaimedItem[]> {
    const v = validate(
      claimByIdsSchema,
      input,
      'claimByIds',
    );
    return claimByIds(this.db, this.tables, { ...v, multiStatement: this.multiStatement });
  }

  renew(handle: Pick<LeaseHandle, 'id' | 'leaseToken'>, leaseMs: number): Promise<RenewOutcome> {
    validate(positiveDurationMs, leaseMs, 'renew', 'leaseMs');
    return renewLease(this.db, this.tables, handle, leaseMs);
  }

  checkpoint(handle: Pick<LeaseHandle, 'id' | 'leaseToken'>, value: unknown): Promise<boolean> {
    const json = this.encodeCapped(value, this.config.payloadMaxBytes, 'checkpoint');
    return saveCheckpoint(this.db, this.tables, handle, json);
  }

  /** Completes the attempt. A result that cannot be stored ends the item dead, class `result_too_large` / `invalid_result`. */
  async complete(handle: LeaseHandle, result?: unknown): Promise<FinalizeResult> {
    if (result === undefined) return this.finish(handle, { kind: 'complete', resultJson: null }, 'completed');
    const encoded = encodePayload(result, Number.POSITIVE_INFINITY);
    if ('error' in encoded) {
      return this.finish(handle, { kind: 'dead', error: `handler result is not storable: result${encoded.at}: ${encoded.error}`, failureClass: 'invalid_result' }, 'dead');
    }
    const json = encoded.json;
    if (Buffer.byteLength(json, 'utf8') > this.config.resultMaxBytes) {
      const error = `handler result is ${Buffer.byteLength(json, 'utf8')} bytes; the cap is ${this.config.resultMaxBytes}`;
      return this.finish(handle, { kind: 'dead', error, failureClass: 'result_too_large' }, 'dead');
    }
    return this.finish(handle, { kind: 'complete', resultJson: json }, 'completed');
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
   * completeMany with lane affinity (docs/design.md §6): when a completion makes the
   * next item of its lane the head, up to `next.max` such new heads that are
   * due and of `next`'s classes and types are claimed in the same
   * transaction under `next`'s lease, so their lanes never wait for a claim
   * round. Each is an ordinary claim (attempt + 1, fenced by the token).
   */
  async completeManyClaimingNext(
    entries: readonly { handle: LeaseHandle; result?: unknown }[],
    next?: SuccessorClaim,
  ): Promise<{ results: FinalizeResult[]; claimed: ClaimedItem[] }> {
    const successors = next === undefined ? undefined : validate(successorClaimSchema, next, 'completeManyClaimingNext');
    const out: (FinalizeResult | undefined)[] = new Array(entries.length);
    const ok: { index: number; handle: LeaseHandle; resultJson: string | null }[] = [];
    for (const [index, e] of entries.entries()) {
      const json = e.result === undefined ? null : encodeJson(e.result);
      if (json === undefined || (json !== null && Buffer.byteLength(json, 'utf8') > this.config.resultMaxBytes)) {
        out[index] = await this.complete(e.handle, e.result);
      } else {
        ok.push({ index, handle: e.handle, resultJson: json });
      }
    }
    let claimed: ClaimedItem[] = [];
    if (ok.length > 0) {
      const done = await completeMany(this.db, this.multiStatement, this.tables, ok, successors);
      claimed = done.claimed;
      ok.forEach((e, k) => {
        const o = done.outcomes[k];
        out[e.index] = { won: o?.won ?? false, state: 'completed', ...(e.handle.lane !== null ? { laneAdvanced: o?.laneAdvanced ?? true } : {}) };
      });
    }
    return { results: out.map((r) => r ?? { won: false, state: 'completed' }), claimed };
  }

  /**
   * Runs `fn` and this item's completion (with `fn`'s value as its result)
   * in one transaction on the ledger's database, for ctx.transaction: the
   * writes `fn` makes commit together with the completion, or not at all.
   *
   * A connection lost before COMMIT (killed, reset, a dead connection from
   * the pool) rolls the transaction back, and it runs again on a fresh
   * connection, `fn` with it, a bounded number of times and without
   * spending an attempt: `fn` may run more than once, but only one run's
   * writes commit. A COMMIT that went unanswered is settled by reading the
   * item (a completed item keeps the token that completed it): committed
   * returns that run's value; rolled back runs it again. Throws
   * LeaseLostError when the completion's CAS loses (nothing of `fn`'s
   * commits), CommitOutcomeUnknownError when the ledger cannot be read.
   */
  async completeWithin<T>(handle: LeaseHandle, fn: (trx: Transaction<Record<string, never>>) => Promise<T>): Promise<T> {
    return runTransaction(
      this.db,
      async (trx) => {
        const value = await fn(trx);
        await this.completeInTransaction(trx, handle, value === undefined ? undefined : value);
        return value;
      },
      async () => (await completionsSettled(this.db, this.tables, [handle]))[0] === 'completed',
    );
  }

  /**
   * Completes inside the caller's transaction on this ledger's database, so
   * the caller's writes and the completion commit together. Throws
   * LeaseLostError (the caller's transaction must roll back) when the CAS loses.
   */
  async completeInTransaction(trx: Executor, handle: LeaseHandle, result?: unknown): Promise<void> {
    const json = result === undefined ? null : this.encodeCapped(result, this.config.resultMaxBytes, 'result');
    await finalizeInTx(trx, this.tables, handle, { kind: 'complete', resultJson: json });
  }

  /** Ends a claimed item whose cancel was requested while it ran; without a reason, the request's reason stays its last error. */
  cancelClaimed(handle: LeaseHandle, reason?: string): Promise<FinalizeResult> {
    return this.finish(handle, { kind: 'cancelled', reason: reason ?? null }, 'cancelled');
  }

  /** A failed attempt: back to pending after the backoff, or dead once the budget is spent. */
  async retry(handle: LeaseHandle, input: RetryInput): Promise<FinalizeResult & { delayMs: number }> {
    const v = validate(retrySchema, input, 'retry');
    const error = this.errorText(v.error);
    const failureClass = v.failureClass ?? 'error';
    if (handle.attempt >= handle.maxAttempts) {
      const r = await this.finish(handle, { kind: 'dead', error, failureClass }, 'dead');
      return { ...r, delayMs: 0 };
    }
    const delayMs = v.delayMs ?? backoffDelayMs(v.backoff ?? DEFAULT_BACKOFF, handle.attempt);
    const r = await this.finish(handle, { kind: 'retry', error, failureClass, delayMs }, 'pending');
    return { ...r, delayMs };
  }

  /** A permanent failure: dead at once. */
  fail(handle: LeaseHandle, input: { error: unknown; failureClass?: string }): Promise<FinalizeResult> {
    const v = validate(failSchema, input, 'fail');
    return this.finish(handle, { kind: 'dead', error: this.errorText(v.error), failureClass: v.failureClass ?? 'permanent' }, 'dead');
  }

  /** Gives the item back without burning budget (deadline, drain, defer, rate limit). */
  release(handle: LeaseHandle, input: { delayMs?: number; reason?: string } = {}): Promise<FinalizeResult> {
    const v = validate(releaseSchema, input, 'release');
    return this.finish(handle, { kind: 'release', delayMs: v.delayMs ?? 0, reason: v.reason ?? null }, 'pending');
  }

  skip(handle: LeaseHandle, reason?: unknown): Promise<FinalizeResult> {
    const reasonJson = reason === undefined ? null : this.encodeCapped(reason, this.config.resultMaxBytes, 'reason');
    return this.finish(handle, { kind: 'skip', reasonJson }, 'skipped');
  }

  /**
   * Parks the item (and its lane) until `wakeDependency(key)` or a probe.
   * If the key was woken after this attempt began (the handler may have read
   * the awaited fact just before it committed), the item goes back to
   * pending at once instead (state `pending`, no attempt spent). A re-block
   * on the same key after the wait expired (the final run a probe gives an
   * expired wait) ends it dead, class `dependency_expired` (state `dead`).
   */
  async block(handle: LeaseHandle, input: { dependencyKey: string; maxWaitMs: number; probeAfterMs?: number; reason?: string }): Promise<FinalizeResult> {
    const v = validate(blockSchema, input, 'block');
    const outcome = await finalizeBlock(this.db, this.tables, handle, {
      kind: 'block',
      dependencyKey: v.dependencyKey,
      maxWaitMs: v.maxWaitMs,
      probeAfterMs: v.probeAfterMs ?? v.maxWaitMs,
      reason: v.reason ?? null,
    });
    const state: ItemState = outcome === 'woken' ? 'pending' : outcome === 'expired' ? 'dead' : 'blocked';
    return { won: outcome !== 'lost', state };
  }

  private async finish(handle: LeaseHandle, f: Finalization, state: ItemState): Promise<FinalizeResult> {
    const won = await finalize(this.db, this.tables, handle, f);
    return { won, state };
  }

  wakeDependency(key: string, opts: { queue?: string } = {}): Promise<WokenItem[]> {
    const v = validate(wakeDependencySchema, { key, ...opts }, 'wakeDependency');
    return wakeDependency(this.db, this.tables, v);
  }

  reclaimExpired(opts: { queue?: string; limit?: number } = {}): Promise<ReclaimOutcome> {
    const v = validate(maintenanceSchema, opts, 'reclaimExpired');
    return reclaimExpired(this.db, this.tables, v);
  }

  probeDependencyWaits(opts: { queue?: string; limit?: number } = {}): Promise<ProbeOutcome> {
    const v = validate(maintenanceSchema, opts, 'probeDependencyWaits');
    return probeDependencyWaits(this.db, this.tables, v);
  }

  /**
   * Records the dependency waits of a queue's blocked items that have none
   * (blocked by code from before schema 3 during a rolling upgrade), so
   * wakeDependency and the probes find them. Returns how many it recorded.
   */
  repairWaits(queue: string): Promise<number> {
    validate(queueName, queue, 'repairWaits', 'queue');
    return repairWaits(this.db, this.tables, queue);
  }

  cancel(id: string, reason?: string): Promise<CancelOutcome> {
    validate(itemId, id, 'cancel', 'id');
    if (reason !== undefined) validate(reasonText, reason, 'cancel', 'reason');
    return cancelItem(this.db, this.tables, id, reason ?? null);
  }

  /** Re-drives a dead or cancelled item as a new item; guarded by the attempt and error digest the operator saw. */
  replay(id: string, guard: { expectAttempt: number; expectErrorDigest: string }): Promise<{ id: string }> {
    const v = validate(
      replaySchema,
      { id, ...guard },
      'replay',
    );
    return replayItem(this.db, this.tables, v);
  }

  /** Deletes terminal items older than `olderThanMs` (and their history); returns how many. */
  purge(opts: { olderThanMs: number; limit?: number; queue?: string }): Promise<number> {
    const v = validate(
      purgeSchema,
      opts,
      'purge',
    );
    return purgeTerminal(this.db, this.tables, v);
  }

  /**
   * Forgets dependency wake marks untouched for a day (at most `limit`; see
   * sql/wake-marks.ts). They belong to no queue: one call per maintenance
   * pass, whatever the item retention.
   */
  forgetWakeMarks(limit = 1000): Promise<number> {
    validate(limitSchema, limit, 'forgetWakeMarks', 'limit');
    return purgeWakeMarks(this.db, this.tables, WAKE_MARK_KEEP_MS, limit);
  }

  stats(queue?: string): Promise<QueueStats[]> {
    if (queue !== undefined) validate(queueName, queue, 'stats', 'queue');
    return queueStats(this.db, this.tables, queue);
  }

  /** How many items of `queue` are `processing` across the fleet (the claim limiter reads it). */
  countProcessing(queue: string): Promise<number> {
    validate(queueName, queue, 'countProcessing', 'queue');
    return countProcessing(this.db, this.tables, queue);
  }

  async inspect(id: string): Promise<{ item: WorkItem; attempts: AttemptRecord[] } | undefined> {
    validate(itemId, id, 'inspect', 'id');
    const item = await getItem(this.db, this.tables, id);
    if (!item) return undefined;
    return { item, attempts: await getAttempts(this.db, this.tables, id) };
  }

  get(id: string): Promise<WorkItem | undefined> {
    validate(itemId, id, 'get', 'id');
    return getItem(this.db, this.tables, id);
  }

  listDead(opts: { queue?: string; limit?: number } = {}): Promise<WorkItem[]> {
    const v = validate(listDeadSchema, opts, 'listDead');
    return listDead(this.db, this.tables, v);
  }

  activate(opts: { queue: string; deployment: string; expectEpoch?: number }): Promise<Ownership> {
    const v = validate(
      activateSchema,
      opts,
      'activate',
    );
    return activateOwnership(this.db, this.tables, v);
  }

  ownership(queue: string): Promise<Ownership | undefined> {
    validate(queueName, queue, 'ownership', 'queue');
    return getOwnership(this.db, this.tables, queue);
  }

  close(): Promise<void> {
    return this.db.destroy();
  }

  private errorText(error: unknown): string {
    let text: string;
    if (error instanceof Error) text = error.stack ?? `${error.name}: ${error.message}`;
    else if (typeof error === 'string') text = error;
    else text = encodeJson(error) ?? String(error);
    return truncate(text, this.config.errorMaxChars) ?? '';
  }

  private encodeCapped(value: unknown, cap: number, field: string): string {
    const encoded = encodePayload(value, cap);
    if ('error' in encoded) throw new ValidationError([{ field: `${field}${encoded.at}`, message: encoded.error }]);
    return encoded.json;
  }
}
