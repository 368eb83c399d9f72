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
}

class LostCas extends Error {}

/**
 * One state change of one item, as a CAS. A terminal change of a laned item
 * also decrements the lane's unfinished count and makes the next pending item
 * of the lane its head, in the same transaction. The lane row is locked first,
 * the same order enqueue takes, so the two never deadlock. Returns whether
 * the CAS won; a lost CAS writes nothing.
 */
export async function applyTransition(db: LedgerDb, t: LedgerTables, spec: TransitionSpec): Promise<boolean> {
  const laneWork = spec.terminal && spec.place.lane !== null;
  if (!laneWork && spec.history === null) {
    return (await casUpdate(db, t, spec)) === 1;
  }
  try {
    return await retryOnConflict(() =>
      db.transaction().execute(async (trx) => {
        const { lane, queue } = spec.place;
        if (laneWork && lane !== null) {
          await sql`UPDATE ${t.lanes} SET active = active - 1 WHERE queue = ${queue} AND lane = ${lane}`.execute(trx);
        }
        if ((await casUpdate(trx, t, spec)) !== 1) throw new LostCas();
        if (laneWork && spec.wasHead) await advanceHead(trx, t, spec.place);
        if (spec.history) await insertHistory(trx, t, spec.place.id, spec.history);
        return true;
      }),
    );
  } catch (error) {
    if (error instanceof LostCas) return false;
    throw error;
  }
}

async function casUpdate(exec: Executor, t: LedgerTables, spec: TransitionSpec): Promise<number> {
  const r = await sql`UPDATE ${t.items} SET ${spec.set}, updated_at = NOW(6)
    WHERE id = ${spec.place.id} AND ${spec.guard}`.execute(exec);
  return affected(r);
}

/**
 * The next unfinished item of the lane becomes its head. Sequences are gap
 * free, but an item cancelled while waiting is skipped by `state = 'pending'`.
 */
async function advanceHead(exec: Executor, t: LedgerTables, place: ItemPlace): Promise<void> {
  await sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6)
    WHERE queue = ${place.queue} AND lane = ${place.lane} AND lane_seq > ${place.laneSeq}
      AND state = 'pending' AND is_head = 0
    ORDER BY lane_seq LIMIT 1`.execute(exec);
}

export async function insertHistory(exec: Executor, t: LedgerTables, itemId: string, h: HistoryEntry): Promise<void> {
  await sql`INSERT INTO ${t.attempts} (id, item_id, attempt, outcome, failure_class, error, worker, started_at, ended_at)
    VALUES (${newId()}, ${itemId}, ${h.attempt}, ${h.outcome}, ${h.failureClass}, ${h.error}, ${h.worker},
      ${h.startedAt}, NOW(6))`.execute(exec);
}
