import { sql } from 'kysely';
import type { LedgerDb } from './connection.js';
import type { Migration } from './migration-initial.js';

/**
 * Schema 16, drain-only queues (Ledger.setDrainOnly, docs/design.md §7,
 * "Draining and deleting a queue"): a queue so set refuses enqueues
 * (QueueDrainingError) while its consumers finish what it holds; once empty it
 * can be deleted. `drain_since` is when the flag was set: producers learn it
 * within a cache interval, so a delete waits that long after it. Every queue
 * with items gets a row, as an enqueue now writes one for a queue it sees first.
 * Its own file so that steps numbered by other branches merge beside it.
 */
export const DRAIN_ONLY_MIGRATION: Migration = {
  version: 16,
  name: 'drain-only queues',
  statements: () => [],
  run: async (conn, t, prefix) => {
    const columns = await queueColumns(conn, prefix + 'queues');
    const add = [];
    if (!columns.has('drain_only')) add.push(sql`ADD COLUMN drain_only TINYINT NOT NULL DEFAULT 0`);
    if (!columns.has('drain_since')) add.push(sql`ADD COLUMN drain_since DATETIME(6) NULL`);
    // One column per statement: TiDB refuses several schema changes in one ALTER on older versions.
    for (const change of add) await sql`ALTER TABLE ${t.queues} ${change}`.execute(conn);
    // A worker serving a pattern finds queues by their rows: each queue with items gets one (one seek per queue).
    for (let after = ''; ; ) {
      const r = await sql<{
        queue: string | null;
      }>`SELECT MIN(queue) AS queue FROM ${t.items} WHERE queue > ${after}`.execute(conn);
      const next = r.rows[0]?.queue;
      if (next === null || next === undefined) break;
      after = String(next);
      await sql`INSERT INTO ${t.queues} (queue, capped_claims, updated_at) VALUES (${after}, 0, NOW(6))
        ON DUPLICATE KEY UPDATE queue = queue`.execute(conn);
    }
  },
};

async function queueColumns(conn: LedgerDb, table: string): Promise<Set<string>> {
  const r = await sql<{ name: string }>`SELECT column_name AS name FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = ${table}`.execute(conn);
  return new Set(r.rows.map((x) => String(x.name).toLowerCase()));
}
