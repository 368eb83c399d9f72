import { sql } from 'kysely';
import type { LedgerDb } from './connection.js';
import type { Migration } from './migration-initial.js';

/**
 * Schema 18, queue settings changed live (Ledger.updateQueue, docs/design/supervisor.md,
 * "Queue settings in the ledger"): per-worker slots and the fleet cap (`maxProcessing`) a queue's row holds,
 * read by every worker at each reconcile; NULL: the worker's own value, else the default. And the row's
 * creation time, its incarnation: a queue deleted and made again under its name has a new one
 * (DEFAULT CURRENT_TIMESTAMP(6), so every statement that writes a queue's first row stamps it; rows there before
 * this step take the step's time). Nullable or defaulted, at the end of the row: MariaDB adds them instantly,
 * TiDB without a backfill. Independent of the other steps' columns, in a file of its own.
 */
export const QUEUE_SETTINGS_MIGRATION: Migration = {
  version: 18,
  name: 'queue settings changed live, queue incarnations',
  statements: () => [],
  run: async (conn, t, prefix) => {
    const columns = await columnsOf(conn, prefix + 'queues');
    const add = [];
    if (!columns.has('slots')) add.push(sql`ADD COLUMN slots INT NULL`);
    if (!columns.has('max_processing')) add.push(sql`ADD COLUMN max_processing INT NULL`);
    if (!columns.has('created_at'))
      add.push(sql`ADD COLUMN created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)`);
    // One column per statement: TiDB refuses several schema changes in one ALTER on older versions.
    for (const change of add) await sql`ALTER TABLE ${t.queues} ${change}`.execute(conn);
  },
};

async function columnsOf(conn: LedgerDb, table: string): Promise<Set<string>> {
  const r = await sql<{ name: string }>`SELECT column_name AS name FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = ${table}`.execute(conn);
  return new Set(r.rows.map((x) => String(x.name).toLowerCase()));
}
