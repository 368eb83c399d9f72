import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { CancelOutcome } from '../../types.js';
import { affected } from '../common/fragments.js';
import { applyTransition } from '../common/transition.js';
import { leaveWaits } from '../waits/waits.js';
import { settleDependents } from '../workflows/settle.js';

const MAX_RACES = 5;

export async function cancelItem(
  db: LedgerDb,
  t: LedgerTables,
  id: string,
  reason: string | null,
): Promise<CancelOutcome> {
  for (let race = 0; race < MAX_RACES; race++) {
    const rows = await sql<{
      queue: string;
      lane: string | null;
      lane_seq: number | null;
      concurrency_key: string | null;
      state: string;
      is_head: number;
      workflow_id: string | null;
    }>`
      SELECT queue, lane, lane_seq, concurrency_key, state, is_head, workflow_id FROM ${t.items}
      WHERE id = ${id}`.execute(db);
    const r = rows.rows[0];
    if (!r) return 'not_found';
    if (r.state === 'processing') {
      // The reason is kept now: the holder ends the item later, and the operator's words are what it ends with.
      const u = await sql`UPDATE ${t.items} SET cancel_requested = 1, last_error = ${
        reason ?? 'cancel requested'
      }, updated_at = NOW(6)
        WHERE id = ${id} AND state = 'processing'`.execute(db);
      if (affected(u) === 1) return 'cancel_requested';
      continue;
    }
    if (r.state !== 'pending' && r.state !== 'blocked') return 'not_cancellable';
    const won = await applyTransition(db, t, {
      place: {
        id,
        queue: r.queue,
        lane: r.lane,
        laneSeq: r.lane_seq === null ? null : Number(r.lane_seq),
        storedKey: r.concurrency_key,
      },
      guard: sql`state = ${r.state} AND is_head = ${r.is_head}`,
      set: sql`state = 'cancelled', failure_class = 'cancelled', last_error = ${reason}, probe_after = NULL,
        terminal_at = NOW(6)`,
      terminal: true,
      wasHead: r.is_head === 1,
      history: null,
      alsoWrite: async (trx) => {
        if (r.state === 'blocked') await leaveWaits(trx, t, [id]);
        // A workflow's job: its dependents settle as after a failure (sql/workflows/settle.ts).
        if (r.workflow_id !== null) await settleDependents(trx, t, [{ id, end: 'failed' }]);
      },
    });
    if (won) return 'cancelled';
  }
  throw new Error(`cancel ${id}: the item kept changing state; try again`);
}
