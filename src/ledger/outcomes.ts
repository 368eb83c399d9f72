import type { Transaction } from 'kysely';
import type { z } from 'zod';
import { OwnershipLostError, ResultNotStorableError, ValidationError } from '../errors.js';
import { groupBy } from '../group-by.js';
import { backoffDelayMs, DEFAULT_BACKOFF } from './backoff.js';
import type { LedgerCapabilities } from './capabilities.js';
import type { Executor, LedgerDb } from './connection.js';
import type { retrySchema } from './inputs.js';
import { runTransaction } from './retry.js';
import { truncate } from './sql/common/fragments.js';
import { completeMany } from './sql/complete/batch.js';
import { completionsSettled } from './sql/complete/settled.js';
import { finishItem, finishItemInTx, type Finishing } from './sql/complete/finish.js';
import { currentEpoch, fenceOf } from './sql/fleet/ownership.js';
import type { LaneHandedOn } from './sql/common/transition.js';
import type { LedgerTables } from './tables.js';
import type { ClaimedItem, FinalizeResult, ItemState, LeaseHandle, SuccessorClaim } from './types.js';
import { encodeJson, encodePayload } from './json.js';
import type { KeyLines } from './key-lines.js';

// How the end of a claimed attempt becomes what the ledger writes: results
// and reasons encoded under their caps, error texts cut to theirs.

/** What ending an attempt needs of the ledger. */
export interface FinishTarget {
  readonly db: LedgerDb;
  readonly tables: LedgerTables;
  readonly capabilities: () => Promise<LedgerCapabilities>;
  readonly resultMaxBytes: number;
  readonly errorMaxChars: number;
  /** Which keys' completions may give up their slots in one round trip (key-lines.ts). */
  readonly keyLines: KeyLines;
}

/** A finishing and the state it writes. */
export interface Ending {
  f: Finishing;
  state: ItemState;
}

export async function finish(target: FinishTarget, handle: LeaseHandle, e: Ending): Promise<FinalizeResult> {
  const won = await finishItem(target.db, target.tables, handle, e.f, (await target.capabilities()).prepared);
  return e.f.kind === 'dead' || e.f.kind === 'retry'
    ? { won, state: e.state, failureClass: e.f.failureClass }
    : { won, state: e.state };
}

/** A result as the item stores it, or why it cannot be stored: the field, the reason, the item's error text. */
type ResultCheck =
  | { json: string }
  | { failureClass: 'invalid_result' | 'result_too_large'; field: string; message: string; text: string };

function checkResult(result: unknown, resultMaxBytes: number): ResultCheck {
  const encoded = encodePayload(result, Number.POSITIVE_INFINITY);
  if ('error' in encoded) {
    const field = `result${encoded.at}`;
    const text = `handler result is not storable: ${field}: ${encoded.error}`;
    return { failureClass: 'invalid_result', field, message: encoded.error, text };
  }
  const bytes = Buffer.byteLength(encoded.json, 'utf8');
  if (bytes <= resultMaxBytes) return { json: encoded.json };
  const message = `is ${bytes} bytes; the cap is ${resultMaxBytes}`;
  return { failureClass: 'result_too_large', field: 'result', message, text: `handler result ${message}` };
}

/**
 * A completion with `result`; a result that cannot be stored ends the item dead, class `result_too_large` /
 * `invalid_result`.
 */
export function completion(result: unknown, resultMaxBytes: number): Ending {
  if (result === undefined) return { f: { kind: 'complete', resultJson: null }, state: 'completed' };
  const checked = checkResult(result, resultMaxBytes);
  if ('json' in checked) return { f: { kind: 'complete', resultJson: checked.json }, state: 'completed' };
  return { f: { kind: 'dead', error: checked.text, failureClass: checked.failureClass }, state: 'dead' };
}

/**
 * Ledger.completeManyClaimingNext: the storable results go through one
 * batch (sql/complete/batch.ts), the others (and coalesced groups) end one
 * by one as `completion` says. Results in input order.
 */
export async function completeEntries(
  target: FinishTarget,
  entries: readonly { handle: LeaseHandle; result?: unknown }[],
  successors: readonly SuccessorClaim[],
): Promise<{ results: FinalizeResult[]; claimed: ClaimedItem[] }> {
  const out: (FinalizeResult | undefined)[] = new Array(entries.length);
  const ok: { index: number; handle: LeaseHandle; resultJson: string | null }[] = [];
  for (const [index, e] of entries.entries()) {
    const json = e.result === undefined ? null : encodeJson(e.result);
    // A coalesced group ends in a transaction of its own, its members with it (sql/complete/finish.ts).
    if (
      e.handle.group !== undefined ||
      json === undefined ||
      (json !== null && Buffer.byteLength(json, 'utf8') > target.resultMaxBytes)
    ) {
      out[index] = await finish(target, e.handle, completion(e.result, target.resultMaxBytes)).catch(
        (error: unknown) => {
          if (error instanceof OwnershipLostError)
            return { won: false, state: 'completed', ownershipLost: true } as const;
          throw error;
        },
      );
    } else {
      ok.push({ index, handle: e.handle, resultJson: json });
    }
  }
  let claimed: ClaimedItem[] = [];
  if (ok.length > 0) {
    const done = await completeMany(
      target.db,
      await target.capabilities(),
      target.tables,
      ok,
      successors,
      target.keyLines,
    );
    claimed = done.claimed;
    ok.forEach((e, k) => {
      const o = done.outcomes[k];
      const keyed = e.handle.lane === null && e.handle.concurrencyKey !== null;
      out[e.index] = {
        won: o?.won ?? false,
        state: 'completed',
        ...(e.handle.lane !== null ? { laneAdvanced: o?.laneAdvanced ?? true } : {}),
        ...(keyed ? { keyAdmitted: o?.keyAdmitted ?? true } : {}),
      };
    });
  }
  const results = out.map((r) => r ?? { won: false, state: 'completed' as const });
  await markOwnershipLost(target, entries, results);
  return { results, claimed };
}

/**
 * Marks the lost completions of leases claimed under an ownership epoch
 * that is no longer their queue's (`ownershipLost`): their holder gives the
 * item back instead of leaving its lease to expire. One read per queue.
 */
async function markOwnershipLost(
  target: FinishTarget,
  entries: readonly { handle: LeaseHandle }[],
  results: FinalizeResult[],
): Promise<void> {
  if (!entries.some((e) => e.handle.epoch !== null && e.handle.epoch !== undefined)) return;
  const lost = entries.flatMap((e, k) => {
    const f = results[k]!.won || results[k]!.ownershipLost ? undefined : fenceOf(e.handle);
    return f === undefined ? [] : [{ k, f }];
  });
  for (const [queue, ofQueue] of groupBy(lost, (l) => l.f.queue)) {
    const now = await currentEpoch(target.db, target.tables, queue);
    for (const { k, f } of ofQueue) if (f.epoch !== now) results[k] = { ...results[k]!, ownershipLost: true };
  }
}

/** A failed attempt: back to pending after the backoff (or `delayMs`), or dead once the budget is spent. */
export function retryEnding(
  target: FinishTarget,
  handle: LeaseHandle,
  v: z.output<typeof retrySchema>,
): Ending & { delayMs: number } {
  const error = errorText(v.error, target.errorMaxChars);
  const failureClass = v.failureClass ?? 'error';
  if (handle.attempt >= handle.maxAttempts)
    return { f: { kind: 'dead', error, failureClass }, state: 'dead', delayMs: 0 };
  const delayMs = v.delayMs ?? backoffDelayMs(v.backoff ?? DEFAULT_BACKOFF, handle.attempt);
  return { f: { kind: 'retry', error, failureClass, delayMs }, state: 'pending', delayMs };
}

/**
 * Ledger.completeWithin: runs `fn` and this item's completion (with `fn`'s
 * value as its result) in one transaction on the ledger's database, for
 * ctx.transaction: the writes `fn` makes commit together with the
 * completion, or not at all.
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
export function completeWithin<T>(
  target: FinishTarget,
  handle: LeaseHandle,
  fn: (trx: Transaction<Record<string, never>>) => Promise<T>,
): Promise<{ value: T; laneAdvanced: LaneHandedOn }> {
  return runTransaction(
    target.db,
    async (trx) => {
      const value = await fn(trx);
      const laneAdvanced = await completeInTransaction(target, trx, handle, value === undefined ? undefined : value);
      return { value, laneAdvanced };
    },
    async () => (await completionsSettled(target.db, target.tables, [handle]))[0] === 'completed',
  );
}

/**
 * Ledger.completeManyWithin: `fn`, then the completions its value asks for,
 * each by its own CAS and in id order (the order claims lock rows in), in
 * one transaction, for a batch handler's ctx.transaction. Runs again after
 * a conflict or a connection lost before COMMIT, as completeWithin; one
 * lost CAS (LeaseLostError) rolls everything back.
 */
export function completeManyWithin<T>(
  target: FinishTarget,
  handles: readonly LeaseHandle[],
  fn: (trx: Transaction<Record<string, never>>) => Promise<T>,
  completions: (value: T) => readonly { id: string; result: unknown }[],
): Promise<{ value: T; completed: Map<string, LaneHandedOn> }> {
  const byId = new Map(handles.map((h) => [h.id, h]));
  let last: LeaseHandle[] = [];
  return runTransaction(
    target.db,
    async (trx) => {
      const value = await fn(trx);
      const wanted = [...completions(value)]
        .filter((c) => byId.has(c.id))
        .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
      const completed = new Map<string, LaneHandedOn>();
      for (const c of wanted) completed.set(c.id, await completeInTransaction(target, trx, byId.get(c.id)!, c.result));
      last = wanted.map((c) => byId.get(c.id)!);
      return { value, completed };
    },
    async () => {
      const settled = await completionsSettled(target.db, target.tables, last);
      return settled.every((s) => s === 'completed')
        ? true
        : settled.every((s) => s !== 'completed')
          ? false
          : undefined;
    },
  );
}

/** A completion inside the caller's transaction; throws LeaseLostError when the CAS loses. */
export async function completeInTransaction(
  target: FinishTarget,
  trx: Executor,
  handle: LeaseHandle,
  result: unknown,
): Promise<LaneHandedOn> {
  const json = result === undefined ? null : storableResult(result, target.resultMaxBytes);
  return finishItemInTx(
    trx,
    target.tables,
    handle,
    { kind: 'complete', resultJson: json },
    (await target.capabilities()).prepared,
  );
}

/** `result` as the JSON an item stores, or a ResultNotStorableError saying why not (what `completion` ends dead). */
function storableResult(result: unknown, resultMaxBytes: number): string {
  const checked = checkResult(result, resultMaxBytes);
  if ('json' in checked) return checked.json;
  throw new ResultNotStorableError(checked.field, checked.message, checked.failureClass);
}

/** An error as the item and its history store it: a stack, a string or JSON, cut to `maxChars`. */
export function errorText(error: unknown, maxChars: number): string {
  let text: string;
  if (error instanceof Error) text = error.stack ?? `${error.name}: ${error.message}`;
  else if (typeof error === 'string') text = error;
  else text = encodeJson(error) ?? String(error);
  return truncate(text, maxChars) ?? '';
}

/** `value` as JSON text of at most `cap` bytes, or a ValidationError naming `field`. */
export function encodeCapped(value: unknown, cap: number, field: string): string {
  const encoded = encodePayload(value, cap);
  if ('error' in encoded) throw new ValidationError([{ field: `${field}${encoded.at}`, message: encoded.error }]);
  return encoded.json;
}

/** The largest progress report an item stores, in bytes of its JSON. */
export const PROGRESS_MAX_BYTES = 4096;

/**
 * A ctx.progress report as the ledger stores it: a number from 0 to 100, or
 * a plain object of at most PROGRESS_MAX_BYTES of JSON; else a ValidationError naming `progress`.
 */
export function encodeProgress(value: unknown): string {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0 || value > 100) {
      throw new ValidationError([{ field: 'progress', message: 'a number must be from 0 to 100' }], 'ctx.progress');
    }
    return JSON.stringify(value);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ValidationError(
      [{ field: 'progress', message: 'must be a number from 0 to 100 or a JSON object' }],
      'ctx.progress',
    );
  }
  return encodeCapped(value, PROGRESS_MAX_BYTES, 'progress');
}
