import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { ItemState, WorkItem } from '../../types.js';
import { keyStanding } from '../keys/limits.js';
import { storedKey } from '../keys/scope.js';
import { processingCount } from './stats.js';
import { readSchedule } from '../schedules/schedules.js';

/**
 * What explain needs beyond the item and the live consumers: the ledger's clock, the queue's processing count and
 * ownership epoch, and the lane's head.
 */
export interface WhyFacts {
  now: Date;
  processing: number;
  ownershipEpoch: number | null;
  /** The lane's current head, for an item behind one. */
  laneHead?: { id: string; state: ItemState; laneSeq: number } | undefined;
  /** The queue is paused (Ledger.pause). */
  paused: boolean;
  /** The queue claims only rescued work (Ledger.setStaleOnly). */
  staleOnly: boolean;
  /** Its key's standing, for a keyed item waiting for a slot. */
  key?: { admitted: number; limit: number | null; waiting: number } | undefined;
  /** Why it was last released, for an item not due yet: a rate limit's refusal says 'rate limited'. */
  lastReleaseReason?: string | null | undefined;
  /**
   * The schedule whose fire enqueued it, when its key has a fire's form and that schedule (of its queue) is in the
   * ledger.
   */
  schedule?: { name: string; fireTime: Date } | undefined;
}

/** A schedule fire's idempotency key: `<schedule name>:<fire time ms>` (src/ledger/schedules.ts). */
const FIRE_KEY = /^([A-Za-z0-9._-]{1,100}):(\d{1,15})$/;

export async function readWhyFacts(db: LedgerDb, t: LedgerTables, item: WorkItem): Promise<WhyFacts> {
  const r = await sql<{
    now: Date;
    processing: number | string;
    epoch: number | string | null;
    paused: number | string | null;
    stale_only: number | string | null;
  }>`SELECT NOW(6) AS now,
    (SELECT paused FROM ${t.queues} WHERE queue = ${item.queue}) AS paused,
    (SELECT stale_only FROM ${t.queues} WHERE queue = ${item.queue}) AS stale_only,
    (${processingCount(t, item.queue)}) AS processing,
    (SELECT epoch FROM ${t.ownership} WHERE queue = ${item.queue}) AS epoch`.execute(db);
  const row = r.rows[0];
  if (!row) throw new Error('explain: the ledger answered no row');
  const facts: WhyFacts = {
    now: row.now,
    processing: Number(row.processing),
    ownershipEpoch: row.epoch === null ? null : Number(row.epoch),
    paused: Number(row.paused ?? 0) === 1,
    staleOnly: Number(row.stale_only ?? 0) === 1,
  };
  if (item.lane !== null && item.laneSeq !== null && !item.isHead) {
    // Backwards from the item to the head: only the lane's backlog ahead of it is passed, never its history.
    const h = await sql<{
      id: string;
      state: ItemState;
      lane_seq: number | string;
    }>`SELECT id, state, lane_seq FROM ${t.items} FORCE INDEX (ix_lane)
      WHERE queue = ${item.queue} AND lane = ${item.lane} AND lane_seq < ${item.laneSeq} AND is_head = 1
      ORDER BY lane_seq DESC LIMIT 1`.execute(db);
    const head = h.rows[0];
    if (head) facts.laneHead = { id: head.id, state: head.state, laneSeq: Number(head.lane_seq) };
  }
  if (item.concurrencyKey !== null && item.lane === null && !item.isHead)
    facts.key = await keyStanding(db, t, item.queue, storedKey(item) ?? item.concurrencyKey);
  const fire = item.idempotencyKey === null ? null : FIRE_KEY.exec(item.idempotencyKey);
  if (fire?.[1] !== undefined) {
    const schedule = await readSchedule(db, t, fire[1]);
    if (schedule?.item.queue === item.queue)
      facts.schedule = { name: schedule.name, fireTime: new Date(Number(fire[2])) };
  }
  if (item.state === 'pending' && item.runAfter > facts.now) {
    const h = await sql<{
      outcome: string;
      error: string | null;
    }>`SELECT outcome, error FROM ${t.attempts} WHERE item_id = ${item.id}
      ORDER BY ended_at DESC LIMIT 1`.execute(db);
    const last = h.rows[0];
    if (last?.outcome === 'released') facts.lastReleaseReason = last.error;
  }
  return facts;
}
