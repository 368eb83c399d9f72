import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';

/**
 * Whether the ledger has ever heard of `queue`: an item (of any state), a
 * settings row (paused, limit per key, fairness, capped claims), a type's own
 * limit, an ownership epoch, or a consumer's registration (live or not yet
 * forgotten). The CLI asks before it writes a setting, so that a typo in a
 * queue's name is refused rather than stored as a new queue nobody serves.
 * Each probe is one primary-key or index-prefix seek.
 */
export async function queueSeen(exec: Executor, t: LedgerTables, queue: string): Promise<boolean> {
  const r = await sql<{ seen: number | string }>`SELECT
      EXISTS (SELECT 1 FROM ${t.items} WHERE queue = ${queue})
      OR EXISTS (SELECT 1 FROM ${t.queues} WHERE queue = ${queue})
      OR EXISTS (SELECT 1 FROM ${t.typeLimits} WHERE queue = ${queue})
      OR EXISTS (SELECT 1 FROM ${t.ownership} WHERE queue = ${queue})
      OR EXISTS (SELECT 1 FROM ${t.consumers} WHERE queue = ${queue}) AS seen`.execute(exec);
  return Number(r.rows[0]?.seen ?? 0) === 1;
}
