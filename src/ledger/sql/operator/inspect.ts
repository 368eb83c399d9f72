import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import { toAttemptRecord, toWorkItem, type AttemptRow, type ItemRow } from '../../rows.js';
import type { LedgerTables } from '../../tables.js';
import type { AttemptRecord, WorkItem } from '../../types.js';
import { ITEM_COLUMNS } from '../common/fragments.js';

export async function getItem(db: LedgerDb, t: LedgerTables, id: string): Promise<WorkItem | undefined> {
  const rows = await sql<ItemRow>`SELECT ${ITEM_COLUMNS} FROM ${t.items} WHERE id = ${id}`.execute(db);
  const row = rows.rows[0];
  return row ? toWorkItem(row) : undefined;
}

export async function getAttempts(db: LedgerDb, t: LedgerTables, id: string): Promise<AttemptRecord[]> {
  const rows =
    await sql<AttemptRow>`SELECT id, item_id, attempt, outcome, failure_class, error, worker, started_at, ended_at,
      stages FROM ${t.attempts} WHERE item_id = ${id} ORDER BY ended_at, attempt`.execute(db);
  return rows.rows.map(toAttemptRecord);
}

/** Dead items, newest first, for the operator's dead-letter view. */
export async function listDead(
  db: LedgerDb,
  t: LedgerTables,
  opts: { queue?: string | undefined; limit: number },
): Promise<WorkItem[]> {
  const filter = opts.queue === undefined ? sql`` : sql`AND queue = ${opts.queue}`;
  const rows = await sql<ItemRow>`SELECT ${ITEM_COLUMNS} FROM ${t.items}
    WHERE state = 'dead' ${filter} ORDER BY terminal_at DESC LIMIT ${opts.limit}`.execute(db);
  return rows.rows.map(toWorkItem);
}
