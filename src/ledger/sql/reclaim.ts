import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import { QUEUE_CLASSES, type ReclaimOutcome } from '../types.js';
import { list, NO_TIME } from './common.js';
import { noneAsNull, noTimeAsNull } from '../rows.js';
import { applyTransition } from './transition.js';

/**
 * Items whose lease ran out without a finalize (the holder crashed or hung).
 * The expired attempt counts against the budget; a reclaimed item keeps its
 * due time, so claims (earliest due first) take it before work due after it. Each change is a CAS on the
 * token that was read and on the lease still being expired, so a holder that
 * renews at the last moment keeps its item.
 */
export async function reclaimExpired(db: LedgerDb, t: LedgerTables, opts: { queue?: string | undefined; limit: number }): Promise<ReclaimOutcome> {
  const queues = opts.queue !== undefined ? [opts.queue] : await queuesWithItems(db, t);
  const rows: ExpiredRow[] = [];
  for (const queue of queues) {
    if (rows.length >= opts.limit) break;
    rows.push(...(await expiredLeases(db, t, queue, opts.limit - rows.length)));
  }
  const out: ReclaimOutcome = { reclaimed: [], dead: [], cancelled: [] };
  for (const r of rows) {
    const cancel = r.cancel_requested === 1;
    const spent = r.attempt >= r.max_attempts;
    const owner = noneAsNull(r.lease_owner);
    const history = {
      attempt: r.attempt,
      outcome: 'lease_expired' as const,
      failureClass: 'lease_expired',
      error: `lease held by ${owner ?? '?'} expired`,
      worker: owner,
      startedAt: noTimeAsNull(r.started_at),
    };
    const won = await applyTransition(db, t, {
      place: { id: r.id, queue: r.queue, lane: r.lane, laneSeq: r.lane_seq === null ? null : Number(r.lane_seq) },
      guard: sql`lease_token = ${r.lease_token} AND state = 'processing' AND lease_until < NOW(6)`,
      set: cancel
        ? // The cancel request recorded its reason as the last error: it stays (the history says the lease expired).
          sql`state = 'cancelled', failure_class = 'cancelled', lease_until = ${NO_TIME}, terminal_at = NOW(6)`
        : spent
          ? sql`state = 'dead', failure_class = 'lease_expired', last_error = ${history.error}, lease_until = ${NO_TIME},
              terminal_at = NOW(6)`
          : // run_after stays: the item keeps its place among the due heads (it was due
            // when it was claimed), so it is among the next claimed, not behind younger work.
            sql`state = 'pending', failure_class = 'lease_expired', last_error = ${history.error}, lease_until = ${NO_TIME}`,
      terminal: cancel || spent,
      wasHead: true,
      history,
    });
    if (won) (cancel ? out.cancelled : spent ? out.dead : out.reclaimed).push(r.id);
  }
  return out;
}

interface ExpiredRow {
  id: string;
  queue: string;
  lane: string | null;
  lane_seq: number | null;
  lease_token: string;
  lease_owner: string | null;
  attempt: number;
  max_attempts: number;
  started_at: Date | null;
  cancel_requested: number;
}

/**
 * There is deliberately no index on lease_until: it would change on every
 * claim, renewal and finalize. Items in flight are few, so the claim index's
 * (queue, class, 'processing') ranges find them, and the expiry is a filter.
 */
async function expiredLeases(db: LedgerDb, t: LedgerTables, queue: string, limit: number): Promise<ExpiredRow[]> {
  const r = await sql<ExpiredRow>`SELECT id, queue, lane, lane_seq, lease_token, lease_owner, attempt, max_attempts, started_at,
      cancel_requested
    FROM ${t.items} FORCE INDEX (ix_claim)
    WHERE queue = ${queue} AND queue_class IN (${list(QUEUE_CLASSES)}) AND state = 'processing' AND lease_until < NOW(6)
    ORDER BY lease_until LIMIT ${limit}`.execute(db);
  return r.rows;
}

/** Distinct queues, read as a loose scan of the claim index's first column. */
async function queuesWithItems(db: LedgerDb, t: LedgerTables): Promise<string[]> {
  const r = await sql<{ queue: string }>`SELECT DISTINCT queue FROM ${t.items} FORCE INDEX (ix_claim)`.execute(db);
  return r.rows.map((row) => row.queue);
}
