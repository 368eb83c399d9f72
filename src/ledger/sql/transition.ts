import { sql, type RawBuilder } from 'kysely';
import type { LedgerDb } from '../connection.js';
import { newId } from '../ids.js';
import { retryOnConflict } from '../retry.js';
import type { LedgerTables } from '../tables.js';
import type { AttemptRecord } from '../types.js';
import { affected, type Executor } from './common.js';

/** Where an item sits: enough to find its lane and its successor. */
export interface ItemPlace {
  id: string;
  queue: string;
  lane: string | null;
  laneSeq: number | null;
}

export interface HistoryEntry {
  attempt: number;
  outcome: AttemptRecord['outcome'];
  failureClass: string | null;
  error: string | null;
  worker: string | null;
  startedAt: Date | null;
}

export interface TransitionSpec {
  place: ItemPlace;
  /** Conditions beyond `id = ?` that make this write a CAS. */
  guard: RawBuilder<unknown>;
  set: RawBuilder<unknown>;
  /** The item leaves the set of unfinished items of its lane. */
  terminal: boolean;
  /** The item was its lane's head, so its successor becomes the head. */
  wasHead: boolean;
  history: HistoryEntry | null;
  /** More writes that belong to this change, run after its CAS won, in its transaction (the item's dependency wait). */
  alsoWrite?: ((exec: Executor) => Promise<void>) | undefined;
}

/** The CAS of a transition lost: the caller no longer holds the item. Raised inside a transaction to roll it back. */
export class LeaseLostError extends Error {
  override readonly name = 'LeaseLostError';
  constructor(readonly itemId: string) {
    super(`item ${itemId}: lease lost (stale token, expired and reclaimed, or no longer processing)`);
  }
}

/**
 * One state change of one item, as a CAS. A terminal change of a laned item
 * also decrements the lane's unfinished count and makes the next pending item
 * of the lane its head, in the same transaction. The lane row is locked first,
 * the same order enqueue takes, so the two never deadlock. Returns whether
 * the CAS won; a lost CAS writes nothing.
 */
export async function applyTransition(db: LedgerDb, t: LedgerTables, spec: TransitionSpec): Promise<boolean> {
  const laneWork = spec.terminal && spec.place.lane !== null;
  if (!laneWork && spec.history === null && spec.alsoWrite === undefined) {
    return (await casUpdate(db, t, spec)) === 1;
  }
  try {
    await retryOnConflict(() => db.transaction().execute((trx) => applyTransitionInTx(trx, t, spec)));
    return true;
  } catch (error) {
    if (error instanceof LeaseLostError) return false;
    throw error;
  }
}

/**
 * The same change inside a transaction the caller owns (ctx.transaction):
 * throws LeaseLostError when the CAS loses, so the caller's writes roll back
 * with it.
 */
export async function applyTransitionInTx(trx: Executor, t: LedgerTables, spec: TransitionSpec): Promise<void> {
  const { lane, queue } = spec.place;
  const laneWork = spec.terminal && lane !== null;
  if (laneWork) {
    await sql`UPDATE ${t.lanes} SET active = active - 1 WHERE queue = ${queue} AND lane = ${lane}`.execute(trx);
  }
  if ((await casUpdate(trx, t, spec)) !== 1) throw new LeaseLostError(spec.place.id);
  if (laneWork && spec.wasHead) await advanceHead(trx, t, spec.place);
  if (spec.history) await insertHistory(trx, t, spec.place.id, spec.history);
  if (spec.alsoWrite) await spec.alsoWrite(trx);
}

async function casUpdate(exec: Executor, t: LedgerTables, spec: TransitionSpec): Promise<number> {
  const r = await sql`UPDATE ${t.items} SET ${spec.set}, updated_at = NOW(6)
    WHERE id = ${spec.place.id} AND ${spec.guard}`.execute(exec);
  return affected(r);
}

/**
 * The first pending item after `place` in its lane becomes the head (a no-op
 * if it already is). Sequences are gap free, but an item cancelled while
 * waiting is skipped by `state = 'pending'`. The caller holds the lane row's
 * lock, so the lane cannot change between the read and the write.
 *
 * Two statements on purpose: MariaDB runs `UPDATE … ORDER BY … LIMIT 1` over
 * a range by buffering every matching row first (48 ms at the head of a
 * 100,000-item lane), and its optimizer prefers ix_claim here, so the read
 * names ix_lane. Returns whether the lane has a new head.
 */
export async function advanceHead(exec: Executor, t: LedgerTables, place: Omit<ItemPlace, 'id'>): Promise<boolean> {
  const next = await sql<{ id: string }>`SELECT id FROM ${t.items} FORCE INDEX (ix_lane)
    WHERE queue = ${place.queue} AND lane = ${place.lane} AND lane_seq > ${place.laneSeq} AND state = 'pending'
    ORDER BY lane_seq LIMIT 1`.execute(exec);
  const id = next.rows[0]?.id;
  if (id === undefined) return false;
  await sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6) WHERE id = ${id} AND state = 'pending'`.execute(exec);
  return true;
}

export async function insertHistory(exec: Executor, t: LedgerTables, itemId: string, h: HistoryEntry): Promise<void> {
  await sql`INSERT INTO ${t.attempts} (id, item_id, attempt, outcome, failure_class, error, worker, started_at, ended_at)
    VALUES (${newId()}, ${itemId}, ${h.attempt}, ${h.outcome}, ${h.failureClass}, ${h.error}, ${h.worker},
      ${h.startedAt}, NOW(6))`.execute(exec);
}
