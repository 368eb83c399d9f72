import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { ProbeOutcome, WokenItem } from '../../upkeep-types.js';
import { runTransaction } from '../../retry.js';
import { list } from '../common/fragments.js';
import { applyTransition } from '../common/transition.js';
import { dueWaits, leaveWaits, waitersOf } from './waits.js';
import { markWoken } from './wake-marks.js';

/**
 * Every item blocked on `key` goes back to pending, due now. Call it after
 * the awaited fact has committed. First the key's wake mark is set to now,
 * under its row lock, which a concurrent block of the same key also takes:
 * a block that commits before this finds its item here, and one that
 * commits after sees the mark and does not park its item (sql/complete/block.ts).
 * Returns the items it moved, to wake their consumers.
 */
export async function wakeDependency(
  db: LedgerDb,
  t: LedgerTables,
  opts: { key: string; queue?: string | undefined },
): Promise<WokenItem[]> {
  // A lost COMMIT is taken as not committed: running the wake again is harmless (it finds nothing left to
  // move, and what it moved the first time is pending for any claim or sweep).
  return runTransaction(
    db,
    async (trx) => {
      await markWoken(trx, t, opts.key);
      const ids = await waitersOf(trx, t, opts.key, opts.queue);
      if (ids.length === 0) return [];
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
    },
    async () => false,
  );
}

/**
 * Blocked items whose probe time has come go back to pending to be
 * re-checked. A wait past its maxWait goes back too, for a final run: its
 * expiry time stays, so a re-block on the same key ends it (sql/complete/block.ts).
 */
export async function probeDependencyWaits(
  db: LedgerDb,
  t: LedgerTables,
  opts: { queue?: string | undefined; limit: number },
): Promise<ProbeOutcome> {
  const rows = await dueWaits(db, t, opts.queue, opts.limit);
  const out: ProbeOutcome = { probed: [], expired: [] };
  for (const r of rows) {
    const won = await applyTransition(db, t, {
      // Not terminal: the item keeps its key's slot, so its key is not needed here.
      place: {
        id: r.id,
        queue: r.queue,
        lane: r.lane,
        laneSeq: r.lane_seq === null ? null : Number(r.lane_seq),
        storedKey: null,
      },
      guard: sql`state = 'blocked' AND probe_after <= NOW(6)`,
      set: sql`state = 'pending', run_after = NOW(6), probe_after = NULL`,
      terminal: false,
      wasHead: true,
      history: null,
      alsoWrite: (trx) => leaveWaits(trx, t, [r.id]),
    });
    if (!won) continue;
    out.probed.push({ id: r.id, queue: r.queue, lane: r.lane });
    if (Number(r.expired) === 1) out.expired.push(r.id);
  }
  return out;
}
