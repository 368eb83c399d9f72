import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import { newId } from '../../ids.js';
import { CommitOutcomeUnknownError, LeaseLostError, OwnershipLostError } from '../../../errors.js';
import {
  CONNECTION_RETRY,
  isConnectionError,
  readAfterLostConnection,
  retryDelay,
  runTransaction,
} from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import type { AttemptRecord } from '../../types.js';
import { markedPrepared } from './bound.js';
import { affected, list } from './fragments.js';
import { leaveKeyWait } from '../keys/key-waits.js';
import { handOnKeys } from '../keys/hand-on.js';
import { handOnLane } from '../lanes/advance.js';
import { refusal, type Fence } from '../fleet/ownership.js';
import { sendEach } from './pipeline.js';

/** Where an item sits: enough to find its lane and its successor, or its concurrency key. */
export interface ItemPlace {
  id: string;
  queue: string;
  lane: string | null;
  laneSeq: number | null;
  /** Its concurrency key as stored: the name of the key row that admitted it (sql/keys/scope.ts). */
  storedKey: string | null;
}

export interface HistoryEntry {
  attempt: number;
  outcome: AttemptRecord['outcome'];
  failureClass: string | null;
  error: string | null;
  worker: string | null;
  startedAt: Date | null;
  /** The attempt's stages as stored (sql/stage-history.ts); null or absent: the row leaves the column out. */
  stages?: string | null | undefined;
}

export interface TransitionSpec {
  place: ItemPlace;
  /** Conditions beyond `id = ?` that make this write a CAS. */
  guard: RawBuilder<unknown>;
  /**
   * The ownership epoch the guard checks, if any: a lost CAS then says whether the epoch moved on (OwnershipLostError).
   */
  fence?: Fence | undefined;
  set: RawBuilder<unknown>;
  /** The item leaves the set of unfinished items of its lane. */
  terminal: boolean;
  /** The item was its lane's head, so its successor becomes the head. */
  wasHead: boolean;
  history: HistoryEntry | null;
  /**
   * The members of a coalesced group (docs/design/batches-and-steps.md, Coalescing), changed
   * with the item in its transaction, each by the same CAS: all or nothing.
   */
  members?: { ids: readonly string[]; guard: RawBuilder<unknown>; set: RawBuilder<unknown> } | undefined;
  /** More writes that belong to this change, run after its CAS won, in its transaction (the item's dependency wait). */
  alsoWrite?: ((exec: Executor) => Promise<void>) | undefined;
  /**
   * True of the item's row once this change has taken effect, and never
   * before nor by another change: how a change without a history row learns,
   * after its connection was lost mid-write, whether it happened. (A change
   * with a history row looks that row up instead.)
   */
  appliedIf?: RawBuilder<unknown> | undefined;
  /** The CAS goes prepared, for TiDB's plan cache (sql/common/bound.ts): `LedgerCapabilities.prepared`. */
  prepared?: boolean | undefined;
}

/**
 * One state change of one item, as a CAS (throws OwnershipLostError, nothing
 * written, when the CAS lost to an ownership epoch that moved on). A terminal change of a lane's head
 * also hands the lane on in the same transaction: its next pending item
 * becomes the head, or the lane goes idle (src/ledger/sql/lanes/advance.ts);
 * of a keyed item, its key's slot goes on (src/ledger/sql/keys/hand-on.ts).
 * Returns whether the CAS won; a lost CAS writes nothing.
 *
 * A lost connection costs nothing: before COMMIT the change runs again on a
 * fresh connection; when the write or its COMMIT went unanswered, the ledger
 * is read (transitionSettled) to tell whether it took effect, so a change
 * that did is reported won, not retried into a lost CAS.
 */
export async function applyTransition(db: LedgerDb, t: LedgerTables, spec: TransitionSpec): Promise<boolean> {
  const laneWork =
    spec.terminal &&
    ((spec.wasHead && spec.place.lane !== null) || (spec.place.storedKey !== null && spec.place.lane === null));
  // Made once, so every run of this change writes the same history row: the row tells whether one committed.
  const historyId = spec.history === null ? undefined : newId();
  const settled = async (): Promise<Settled> => transitionSettled(db, t, spec, historyId);
  if (!laneWork && spec.history === null && spec.alsoWrite === undefined && spec.members === undefined) {
    for (let attempt = 1; ; attempt++) {
      try {
        if ((await casUpdate(db, t, spec)) === 1) return true;
        if (spec.fence === undefined) return false;
        const refused = await refusal(db, t, spec.fence, spec.place.id);
        if (refused instanceof OwnershipLostError) throw refused;
        return false;
      } catch (error) {
        if (!isConnectionError(error) || attempt >= CONNECTION_RETRY.maxAttempts) throw error;
        const outcome = await readAfterLostConnection(settled, error);
        if (outcome === 'unknown') throw new CommitOutcomeUnknownError(error);
        if (outcome !== 'open') return outcome === 'applied';
        await retryDelay(CONNECTION_RETRY, attempt);
      }
    }
  }
  try {
    await runTransaction(
      db,
      (trx) => applyTransitionInTx(trx, t, spec, historyId),
      async () => {
        const outcome = await settled();
        // 'lost': it runs again, and its CAS loses.
        return outcome === 'unknown' ? undefined : outcome === 'applied';
      },
    );
    return true;
  } catch (error) {
    if (error instanceof LeaseLostError && !(error instanceof OwnershipLostError)) return false;
    throw error;
  }
}

/**
 * After a write of `spec` went unanswered: 'open' (its guard still holds, so
 * it did not happen and may run again), 'applied', 'lost' (someone else
 * moved the item), or 'unknown' (the change leaves nothing to tell it by).
 * The read locks the item's row, so it waits for the lost session's
 * transaction, which wrote that row, to end one way or the other.
 */
export async function transitionSettled(
  exec: Executor,
  t: LedgerTables,
  spec: TransitionSpec,
  historyId: string | undefined,
): Promise<Settled> {
  const r = await sql<{ open: number | null; applied: number | null }>`SELECT (${spec.guard}) AS open,
      ${spec.appliedIf !== undefined ? sql`(${spec.appliedIf})` : sql`NULL`} AS applied
    FROM ${t.items} WHERE id = ${spec.place.id} FOR UPDATE`.execute(exec);
  const row = r.rows[0];
  if (row === undefined) return 'unknown';
  if (Number(row.open) === 1) return 'open';
  if (historyId !== undefined) {
    const h = await sql<{
      n: number | string;
    }>`SELECT COUNT(*) AS n FROM ${t.attempts} WHERE id = ${historyId}`.execute(exec);
    return Number(h.rows[0]?.n) > 0 ? 'applied' : 'lost';
  }
  if (row.applied === null) return 'unknown';
  return Number(row.applied) === 1 ? 'applied' : 'lost';
}

export type Settled = 'open' | 'applied' | 'lost' | 'unknown';

/**
 * The same change inside a transaction the caller owns (ctx.transaction):
 * throws LeaseLostError (OwnershipLostError when the epoch moved on) when the CAS loses, so the caller's writes roll
 * back
 * with it. The item's row is locked first, then, when a head ended, its
 * lane's successor or lane row (docs/design/ledger-sql.md, lock order).
 */
export async function applyTransitionInTx(
  trx: Executor,
  t: LedgerTables,
  spec: TransitionSpec,
  historyId: string = newId(),
): Promise<LaneHandedOn> {
  const { lane, queue, laneSeq } = spec.place;
  if ((await casUpdate(trx, t, spec)) !== 1) throw await refusal(trx, t, spec.fence, spec.place.id);
  if (spec.members !== undefined && spec.members.ids.length > 0) {
    const m = spec.members;
    const r = await sql`UPDATE ${t.items} SET ${m.set}, updated_at = NOW(6) WHERE id IN (${list(m.ids)}) AND ${
      m.guard
    }`.execute(trx);
    if (affected(r) !== m.ids.length) throw new LeaseLostError(spec.place.id);
  }
  const handedOn =
    spec.terminal && spec.wasHead && lane !== null && laneSeq !== null
      ? await handOnLane(trx, t, { queue, lane, laneSeq }, spec.prepared === true)
      : undefined;
  const key = spec.place.storedKey;
  // An admitted item's slot goes to its key's next waiting item; a waiting one leaves the line. (A laned item's key
  // only dealt its round.)
  if (spec.terminal && key !== null && lane === null) {
    await (spec.wasHead
      ? handOnKeys(sendEach(trx), t, [{ queue, key, n: 1, admit: 1 }])
      : leaveKeyWait(trx, t, spec.place.id));
  }
  if (spec.history) await insertHistory(trx, t, spec.place.id, spec.history, historyId);
  if (spec.alsoWrite) await spec.alsoWrite(trx);
  return handedOn;
}

/** Whether an ended head's lane got a new head (true) or went idle (false); undefined when no lane was handed on. */
export type LaneHandedOn = boolean | undefined;

async function casUpdate(exec: Executor, t: LedgerTables, spec: TransitionSpec): Promise<number> {
  const cas = sql`UPDATE ${t.items} SET ${spec.set}, updated_at = NOW(6) WHERE id = ${spec.place.id} AND ${spec.guard}`;
  const r = await markedPrepared(spec.prepared === true, cas).execute(exec);
  return affected(r);
}

export async function insertHistory(
  exec: Executor,
  t: LedgerTables,
  itemId: string,
  h: HistoryEntry,
  id: string = newId(),
): Promise<void> {
  const stages = h.stages ?? null;
  // Only an attempt that timed stages names the column: every other sends the statement it sent before.
  if (stages !== null) {
    await sql`INSERT INTO ${t.attempts}
        (id, item_id, attempt, outcome, failure_class, error, worker, started_at, ended_at, stages)
      VALUES (${id}, ${itemId}, ${h.attempt}, ${h.outcome}, ${h.failureClass}, ${h.error}, ${h.worker},
        ${h.startedAt}, NOW(6), ${stages})`.execute(exec);
    return;
  }
  await sql`INSERT INTO ${t.attempts} (id, item_id, attempt, outcome, failure_class, error, worker, started_at,
    ended_at)
    VALUES (${id}, ${itemId}, ${h.attempt}, ${h.outcome}, ${h.failureClass}, ${h.error}, ${h.worker},
      ${h.startedAt}, NOW(6))`.execute(exec);
}
