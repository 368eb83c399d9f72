import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { affected } from '../common/fragments.js';
import { toScheduleRow, type ScheduleRow } from './schedules.js';

// A schedule's fires (docs/design/wake.md, "Recurring schedules"): which are due
// on the ledger's clock, and the CAS that advances one schedule's next fire
// time in the transaction that enqueues its items, so of the replicas that
// find it due at once exactly one enqueues them.

/** The ledger's now, and the earliest next fire time of an unpaused schedule (null without one). */
export async function readEarliestFire(exec: Executor, t: LedgerTables): Promise<{ now: Date; earliest: Date | null }> {
  const r = await sql<{ now: Date; earliest: Date | null }>`SELECT NOW(6) AS now,
    (SELECT next_fire_at FROM ${
      t.schedules
    } FORCE INDEX (ix_due) WHERE paused = 0 ORDER BY next_fire_at LIMIT 1) AS earliest`.execute(exec);
  const row = r.rows[0];
  if (!row) throw new Error('schedules: no answer for the ledger clock');
  return { now: row.now, earliest: row.earliest };
}

/**
 * Up to `limit` unpaused schedules whose next fire time has come on the ledger's clock, earliest first, with that
 * clock's now.
 */
export async function readDueSchedules(
  exec: Executor,
  t: LedgerTables,
  limit: number,
): Promise<{ now: Date; due: ScheduleRow[] }> {
  const r = await sql<
    Parameters<typeof toScheduleRow>[0] & { now: Date }
  >`SELECT name, source, pattern, tz, every_ms, item, backfill_ms, paused,
    next_fire_at, last_fire_at, fires, revision, created_at, updated_at, NOW(6) AS now
    FROM ${
      t.schedules
    } FORCE INDEX (ix_due) WHERE paused = 0 AND next_fire_at <= NOW(6) ORDER BY next_fire_at LIMIT ${sql.raw(
      String(Math.trunc(limit)),
    )}`.execute(exec);
  const now = r.rows[0]?.now ?? (await readEarliestFire(exec, t)).now;
  return { now, due: r.rows.map(toScheduleRow) };
}

/**
 * Advances a schedule past the fires being enqueued, if nobody has written
 * it since it was read (`revision`) and it is not paused: one CAS, so of the
 * replicas that try at once exactly one goes on to enqueue.
 */
export async function advanceSchedule(
  exec: Executor,
  t: LedgerTables,
  s: { name: string; revision: number; nextFireAt: Date; lastFireAt: Date | null; fires: number },
): Promise<boolean> {
  const last = s.lastFireAt === null ? sql`last_fire_at` : sql`${s.lastFireAt}`;
  const r =
    await sql`UPDATE ${t.schedules} SET next_fire_at = ${s.nextFireAt}, last_fire_at = ${last}, fires = fires + ${
      s.fires
    },
    revision = revision + 1, updated_at = NOW(6)
    WHERE name = ${s.name} AND revision = ${s.revision} AND paused = 0`.execute(exec);
  return affected(r) === 1;
}
