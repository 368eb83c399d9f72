import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { LeaseHandle } from '../../types.js';

/**
 * How many times the held item was given back without spending an attempt
 * since its last spent one: its history's `released` rows at its current
 * attempt number (a release gives the attempt back, so every release
 * between two spent attempts carries the same number). A Defer without a
 * time backs off by this count (docs/design/handlers.md, Handler outcomes).
 */
export async function releasesSinceSpentAttempt(db: LedgerDb, t: LedgerTables, h: LeaseHandle): Promise<number> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${t.attempts}
    WHERE item_id = ${h.id} AND attempt = ${h.attempt} AND outcome = 'released'`.execute(db);
  return Number(r.rows[0]?.n ?? 0);
}
