import { sql } from 'kysely';
import { TransactionConflictError, TransactionRolledBackError, ValidationError } from '../errors.js';
import type { LedgerCapabilities } from './capabilities.js';
import type { Executor, LedgerDb } from './connection.js';
import {
  DEFAULT_MAX_ATTEMPTS,
  type enqueueItemFieldsSchema,
  type ClaimCandidate,
  type EnqueueInput,
  type EnqueueOptions,
} from './inputs.js';
import {
  countConflict,
  DEFAULT_RETRY,
  ER_DUP_ENTRY,
  errno,
  isRetryableConflict,
  retryDelay,
  retryOnConflict,
  retryTransaction,
} from './retry.js';
import { grantLease } from './sql/claim/claimed.js';
import { queueScoped } from './sql/common/fragments.js';
import { claimableAtInsert, claimedAtInsert, type InsertClaim, type NewItem } from './sql/enqueue/new-item.js';
import { fitsOneStatement, insertItems, type KeyCheck } from './sql/enqueue/insert.js';
import { insertLanedOneTrip } from './sql/enqueue/laned.js';
import { insertKeyedTwoTrips } from './sql/enqueue/keyed.js';
import { readKeyRules, scopeKeys } from './sql/keys/scope.js';
import type { LedgerTables } from './tables.js';
import type { ClaimedItem, EnqueueResult } from './types.js';
import { encodePayload } from './json.js';
import { modeProof } from './mode-proof.js';
import type { QueueGate } from './queue-gate.js';
import { loadOtel, otelSettled } from '../tracing/otel.js';
import { startPublish, type Publishing } from '../tracing/publish.js';

/**
 * A lease `reserve` answers for items inserted claimed: up to `max` of the eligible ones, of those it `accepts` when it
 * says.
 */
export type ClaimAtInsert = InsertClaim & { max: number; accepts?: (item: ClaimCandidate) => boolean };

/** What enqueueing needs of the ledger. */
export interface EnqueueTarget {
  readonly db: LedgerDb;
  readonly tables: LedgerTables;
  readonly capabilities: () => Promise<LedgerCapabilities>;
  readonly payloadMaxBytes: number;
  /** Built once per ledger (see inputs.ts on schemas built per call). */
  readonly itemFields: ReturnType<typeof enqueueItemFieldsSchema>;
  /** Whether the ledger stores request digests with idempotency keys (schema 13; sql/enqueue/request-digests.ts). */
  readonly requestDigests: () => Promise<boolean>;
  /** Refuses an enqueue to a drain-only queue and writes a new queue's row (schema 16; queue-gate.ts). */
  readonly gate: QueueGate;
}

/** Validates and inserts a batch, in the caller's transaction when `opts` names one. Results are in input order. */
export async function enqueueItems(
  target: EnqueueTarget,
  inputs: readonly EnqueueInput[],
  opts: EnqueueOptions,
  prefix: string,
): Promise<EnqueueResult[]> {
  const items = prepareItems(target, inputs, prefix);
  if (items.length === 0) return [];
  // A prefix of '' is `Ledger.enqueue`'s: a single-item call.
  const batch = prefix !== '';
  const caller = opts.transaction;
  await target.gate.check(items, batch, caller === undefined ? undefined : modeProof(caller));
  await scopeKeyed(target, items, prefix);
  const spans = publishSpans(inputs, items, !batch);
  const publishing = spans instanceof Promise ? await spans : spans;
  try {
    const results =
      caller !== undefined
        ? await enqueueInCallerTransaction(target, modeProof(caller), items, await keyed(target, items, batch))
        : await insertPrepared(target, items, await keyed(target, items, batch));
    publishing?.end(results);
    return results;
  } catch (error) {
    publishing?.fail(error);
    throw error;
  }
}

/**
 * The enqueue's PRODUCER spans, each item's traceparent set from its span
 * (src/tracing/publish.ts); undefined without OpenTelemetry. Every enqueue
 * passes here, the producer's and a direct `ledger.enqueue`'s, in the
 * caller's transaction or not: the spans live in the ledger's enqueue, not
 * the producer (docs/design/parts.md, Tracing). The API is loaded at the first
 * enqueue; after that this is one check.
 */
function publishSpans(
  inputs: readonly EnqueueInput[],
  items: NewItem[],
  single: boolean,
): Publishing | undefined | Promise<Publishing | undefined> {
  if (otelSettled()) return startPublish(inputs, items, single);
  return loadOtel().then(() => startPublish(inputs, items, single));
}

/** Checks one input as `Ledger.enqueue` would (ValidationError naming its fields), writing nothing. */
export function checkEnqueueInput(target: EnqueueTarget, input: EnqueueInput): void {
  prepareItems(target, [input], '');
}

/**
 * Ledger.enqueueClaiming: once the batch is validated, `reserve` sees the
 * items that may be inserted already claimed (due now, no idempotency key;
 * of a lane, only the batch's first item) and may answer a lease; up to
 * `max` of them are then inserted under it (state processing, attempt 1),
 * for a consumer that starts them without a claim round trip. A laned item
 * keeps the lease only if its lane turns out idle, so it is the head: lane
 * order holds.
 */
export async function enqueueItemsClaiming(
  target: EnqueueTarget,
  inputs: readonly EnqueueInput[],
  reserve: (eligible: readonly ClaimCandidate[]) => ClaimAtInsert | undefined,
): Promise<{ results: EnqueueResult[]; claimed: ClaimedItem[] }> {
  const items = prepareItems(target, inputs, 'items');
  await target.gate.check(items, true);
  await scopeKeyed(target, items, 'items');
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
    const lease = grantLease({ owner: claim.owner, token: claim.token, leaseMs: claim.leaseMs });
    const takers = claim.accepts ? eligible.filter((item) => claim.accepts?.(item) === true) : eligible;
    for (const item of takers.slice(0, claim.max)) item.claim = lease;
  }
  const nowMs = Date.now();
  const spans = publishSpans(inputs, items, false);
  const publishing = spans instanceof Promise ? await spans : spans;
  let results: EnqueueResult[];
  try {
    results = await insertPrepared(target, items, await keyed(target, items, true));
  } catch (error) {
    publishing?.fail(error);
    throw error;
  }
  publishing?.end(results);
  const claimed: ClaimedItem[] = [];
  items.forEach((item, i) => {
    const r = results[i];
    // The insert dropped the claim of a laned item whose lane was busy.
    if (item.claim && r && !r.duplicate) claimed.push(claimedAtInsert(r.id, item, item.claim, nowMs, r.laneSeq));
  });
  return { results, claimed };
}

/**
 * Decides whose limit admits each keyed item (sql/keys/scope.ts): its type's
 * own where the ledger holds one, else its queue's; and gives it that
 * limit and its queue's fairness, which its admission writes in its text.
 */
async function scopeKeyed(target: EnqueueTarget, items: NewItem[], prefix: string): Promise<void> {
  const keyed = items.filter((i) => i.concurrencyKey !== null);
  if (keyed.length === 0) return;
  scopeKeys(
    items,
    await readKeyRules(
      target.db,
      target.tables,
      keyed.map((i) => i.queue),
    ),
    prefix,
  );
}

/**
 * How a batch's idempotency keys are checked (sql/enqueue/insert.ts); whether digests are stored is asked only of a
 * batch with a key.
 */
async function keyed(target: EnqueueTarget, items: readonly NewItem[], batch: boolean): Promise<KeyCheck> {
  const digests = items.some((i) => i.idempotencyKey !== null) && (await target.requestDigests());
  return { batch, digests };
}

async function insertPrepared(target: EnqueueTarget, items: NewItem[], keys: KeyCheck): Promise<EnqueueResult[]> {
  const { db, tables } = target;
  if (items.length === 0) return [];
  const caps = await target.capabilities();
  const order = caps.idOrder;
  if (items.every((i) => i.lane === null && i.concurrencyKey === null) && fitsOneStatement(items)) {
    // No lane or key bookkeeping: the whole batch is one INSERT (plus a read when it
    // has idempotency keys), atomic without a transaction's extra round trips.
    return retryOnConflict(
      () => insertItems(db, tables, items, false, order, keys),
      undefined,
      (e) => errno(e) === ER_DUP_ENTRY,
    );
  }
  if (items.every((i) => i.idempotencyKey === null) && fitsOneStatement(items)) {
    return items.every((i) => i.lane === null)
      ? insertKeyedTwoTrips(db, caps, tables, items)
      : insertLanedOneTrip(db, caps, tables, items);
  }
  return retryTransaction(
    db,
    (trx) => insertItems(trx, tables, items, false, order, keys),
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
async function enqueueInCallerTransaction(
  target: EnqueueTarget,
  trx: Executor,
  items: NewItem[],
  keys: KeyCheck,
): Promise<EnqueueResult[]> {
  let duplicates = 0;
  let conflicts = 0;
  const order = (await target.capabilities()).idOrder;
  for (;;) {
    await sql`SAVEPOINT lanewake_enqueue`.execute(trx);
    try {
      const out = await insertItems(
        trx,
        target.tables,
        items,
        duplicates + conflicts > 0 ? target.db : false,
        order,
        keys,
      );
      await sql`RELEASE SAVEPOINT lanewake_enqueue`.execute(trx);
      return out;
    } catch (error) {
      try {
        await sql`ROLLBACK TO SAVEPOINT lanewake_enqueue`.execute(trx);
      } catch {
        throw new TransactionRolledBackError(error);
      }
      if (errno(error) === ER_DUP_ENTRY && ++duplicates <= 3) continue;
      // The server refused the statement but kept the transaction (TiDB gives up on a
      // unique key many callers wait for): look again, the winner has likely committed.
      if (!isRetryableConflict(error)) throw error;
      if (++conflicts >= DEFAULT_RETRY.maxAttempts) throw new TransactionConflictError(error);
      countConflict(error);
      await retryDelay(DEFAULT_RETRY, conflicts);
    }
  }
}

/**
 * Validates every input (all issues at once, as `${prefix}[i].field`, or as `fieldAt(i)` names the input) and encodes
 * its payload once. Throws ValidationError; returns the items in input order.
 */
export function prepareItems(
  target: Pick<EnqueueTarget, 'itemFields' | 'payloadMaxBytes'>,
  inputs: readonly EnqueueInput[],
  prefix: string,
  fieldAt?: (i: number) => string,
): NewItem[] {
  const issues: ValidationError['issues'][number][] = [];
  const out: NewItem[] = [];
  inputs.forEach((input, i) => {
    const at = fieldAt !== undefined ? fieldAt(i) : prefix === '' ? '' : `${prefix}[${i}]`;
    const parsed = target.itemFields.safeParse(input);
    if (!parsed.success) issues.push(...ValidationError.fromZod(parsed.error, undefined, at).issues);
    // The payload is checked as enqueueItemSchema checks it, and encoded once for both.
    const isObject = typeof input === 'object' && input !== null && !Array.isArray(input);
    const payload = isObject
      ? encodePayload((input as { payload?: unknown }).payload, target.payloadMaxBytes)
      : undefined;
    if (payload && 'error' in payload)
      issues.push({ field: `${at === '' ? 'payload' : `${at}.payload`}${payload.at}`, message: payload.error });
    if (!parsed.success || !payload || 'error' in payload) return;
    const v = parsed.data;
    out.push({
      queue: v.queue,
      type: v.type,
      payloadJson: payload.json,
      lane: v.lane ?? null,
      concurrencyKey: v.concurrencyKey ?? null,
      priority: v.priority ?? 0,
      queueClass: v.queueClass ?? 'default',
      maxAttempts: v.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      runAt: v.runAt ?? null,
      delayMs: v.delayMs ?? 0,
      idempotencyKey: v.idempotencyKey ?? null,
      traceparent: null,
    });
  });
  if (issues.length > 0) throw new ValidationError(issues, 'enqueue');
  return out;
}
