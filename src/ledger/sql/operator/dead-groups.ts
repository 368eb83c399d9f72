import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { QUEUE_CLASSES } from '../../types.js';
import type { DeadGroup } from '../../operator-types.js';
import { inline, list } from '../common/fragments.js';

/**
 * How many dead items of a queue the groups are counted from at most (one range of ix_claim, as stats caps its counts).
 */
export const DEAD_GROUP_READ = 10_000;

/**
 * A queue's dead items grouped by type and failure class, most recent group
 * first: counted among its first 10,000 dead items (one bounded range of
 * ix_claim), each group with its most recent item's id and error.
 */
export async function deadGroups(exec: Executor, t: LedgerTables, queue: string): Promise<DeadGroup[]> {
  const r = await sql<{ id: string; type: string; failure_class: string | null; terminal_at: Date }>`
    SELECT i.id, i.type, i.failure_class, i.terminal_at FROM (SELECT id AS w FROM ${t.items}
      WHERE queue = ${queue} AND queue_class IN (${list(QUEUE_CLASSES)}) AND state = 'dead' LIMIT ${inline(
        DEAD_GROUP_READ,
      )}) d
    JOIN ${t.items} i ON i.id = d.w`.execute(exec);
  const groups = new Map<
    string,
    { type: string; failureClass: string | null; count: number; lastAt: Date; sampleId: string }
  >();
  for (const row of r.rows) {
    const k = JSON.stringify([row.type, row.failure_class]);
    const g = groups.get(k);
    if (!g)
      groups.set(k, {
        type: row.type,
        failureClass: row.failure_class,
        count: 1,
        lastAt: row.terminal_at,
        sampleId: row.id,
      });
    else {
      g.count++;
      if (row.terminal_at > g.lastAt) Object.assign(g, { lastAt: row.terminal_at, sampleId: row.id });
    }
  }
  if (groups.size === 0) return [];
  const ids = [...groups.values()].map((g) => g.sampleId);
  const errors = await sql<{
    id: string;
    last_error: string | null;
  }>`SELECT id, LEFT(last_error, 300) AS last_error FROM ${t.items}
    WHERE id IN (${list(ids)})`.execute(exec);
  const errorOf = new Map(errors.rows.map((e) => [e.id, e.last_error]));
  return [...groups.values()]
    .map((g) => ({
      queue,
      type: g.type,
      failureClass: g.failureClass,
      count: g.count,
      lastError: errorOf.get(g.sampleId) ?? null,
      lastAt: g.lastAt,
      sampleId: g.sampleId,
    }))
    .sort((a, b) => b.lastAt.getTime() - a.lastAt.getTime());
}
