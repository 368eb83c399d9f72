import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import { retryOnConflict } from '../retry.js';
import { list } from './common.js';
import { applyTransition } from './transition.js';
import { dueWaits, leaveWaits, waitersOf } from './waits.js';

export interface WokenItem {
  id: string;
  queue: string;
  lane: string | null;
}

/**
 * Every item blocked on `key` goes back to pending, due now. Call it after
 * the awaited fact has committed. Returns the items it moved, to wake their
 * consumers.
 */
export async function wakeDependency(db: LedgerDb, t: LedgerTables, opts: { key: string; queue?: string | undefined }): Promise<WokenItem[]> {
  const ids = await waitersOf(db, t, opts.key, opts.queue);
  if (ids.length === 0) return [];
  return retryOnConflict(() =>
    db.transaction().execute(async (trx) => {
      // Locks the rows this call moves; an item that left `blocked` meanwhile is not among them.
      const moving = await sql<WokenItem>`SELECT id, queue, lane FROM ${t.items}
        WHERE id IN (${list(ids)}) AND state = 'blocked' AND dependency_key = ${opts.key} FOR UPDATE`.execute(trx);
      if (moving.rows.length === 0) return [];
      const movingIds = moving.rows.map((x) => x.id);
      await sql`UPDATE ${t.items}
        SET state = 'pending', run_after = NOW(6), probe_after = NULL, block_expires_at = NULL, blocked_at = NULL,
          updated_at = NOW(6)
        WHERE id IN (${list(movingIds)}) AND state = 'blocked' AND dependency_key = ${opts.key}`.execute(trx);
      await leaveWaits(trx, t, movingIds);
      return moving.rows;
    }),
  );
}

export interface ProbeOutcome {
  /** Due for a probe: back to pending so the handler checks its dependency again. */
  probed: WokenItem[];
  /** Waited past maxWait: dead, class `dependency_expired`. */
  expired: string[];
}

/** Blocked items whose probe time has come: expire those past their max wait, release the rest to be re-checked. */
export async function probeDependencyWaits(db: LedgerDb, t: LedgerTables, opts: { queue?: string | undefined; limit: number }): Promise<ProbeOutcome> {
  const rows = await dueWaits(db, t, opts.queue, opts.limit);
  const out: ProbeOutcome = { probed: [], expired: [] };
  for (const r of rows) {
    const expired = Number(r.expired) === 1;
    const error = `dependency ${r.dependency_key} not met before the wait expired`;
    const won = await applyTransition(db, t, {
      place: { id: r.id, queue: r.queue, lane: r.lane, laneSeq: r.lane_seq === null ? null : Number(r.lane_seq) },
      guard: expired
        ? sql`state = 'blocked' AND block_expires_at <= NOW(6)`
        : sql`state = 'blocked' AND probe_after <= NOW(6)`,
      set: expired
        ? sql`state = 'dead', failure_class = 'dependency_expired', last_error = ${error}, probe_after = NULL,
            terminal_at = NOW(6)`
        : sql`state = 'pending', run_after = NOW(6), probe_after = NULL`,
      terminal: expired,
      wasHead: true,
      history: null,
      alsoWrite: (trx) => leaveWaits(trx, t, [r.id]),
    });
    if (!won) continue;
    if (expired) out.expired.push(r.id);
    else out.probed.push({ id: r.id, queue: r.queue, lane: r.lane });
  }
  return out;
}
