import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import { parseJson } from '../../rows.js';
import type { ScheduleItem, ScheduleSource, ScheduleView } from '../../schedule-types.js';
import type { LedgerTables } from '../../tables.js';
import { affected } from '../common/fragments.js';

// A recurring schedule's row (schema 12): its definition, written by the API
// or the config file's reconcile, paused and resumed by an operator. Every
// write bumps `revision`, the CAS a fire (sql/schedules/fires.ts) and a
// definition's update hold to.

/** A schedule's definition as written: the item template as JSON text. */
export interface ScheduleRowInput {
  name: string;
  source: ScheduleSource;
  pattern: string | null;
  tz: string | null;
  everyMs: number | null;
  queue: string;
  itemJson: string;
  backfillMs: number;
  nextFireAt: Date;
}

/** A schedule as stored, with its revision. */
export type ScheduleRow = ScheduleView & { revision: number };

interface RawRow {
  name: string;
  source: string;
  pattern: string | null;
  tz: string | null;
  every_ms: number | string | null;
  item: string;
  backfill_ms: number | string;
  paused: number;
  next_fire_at: Date;
  last_fire_at: Date | null;
  fires: number | string;
  revision: number | string;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = sql`name, source, pattern, tz, every_ms, item, backfill_ms, paused, next_fire_at, last_fire_at,
  fires, revision, created_at, updated_at`;

export function toScheduleRow(r: RawRow): ScheduleRow {
  return {
    name: r.name,
    source: r.source === 'config' ? 'config' : 'api',
    pattern: r.pattern,
    tz: r.tz,
    everyMs: r.every_ms === null ? null : Number(r.every_ms),
    item: parseJson(r.item) as ScheduleItem,
    backfillMs: Number(r.backfill_ms),
    paused: Number(r.paused) === 1,
    nextFireAt: r.next_fire_at,
    lastFireAt: r.last_fire_at,
    fires: Number(r.fires),
    revision: Number(r.revision),
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export async function readSchedule(exec: Executor, t: LedgerTables, name: string): Promise<ScheduleRow | undefined> {
  const r = await sql<RawRow>`SELECT ${COLUMNS} FROM ${t.schedules} WHERE name = ${name}`.execute(exec);
  const row = r.rows[0];
  return row ? toScheduleRow(row) : undefined;
}

/** Every schedule, by name (an operator's list: schedules are few). */
export async function readSchedules(exec: Executor, t: LedgerTables): Promise<ScheduleRow[]> {
  const r = await sql<RawRow>`SELECT ${COLUMNS} FROM ${t.schedules} ORDER BY name`.execute(exec);
  return r.rows.map(toScheduleRow);
}

/** A new schedule, unpaused; false when one of that name exists (INSERT IGNORE: a racing writer's row stays). */
export async function insertSchedule(exec: Executor, t: LedgerTables, s: ScheduleRowInput): Promise<boolean> {
  const r = await sql`INSERT IGNORE INTO ${t.schedules}
    (name, source, pattern, tz, every_ms, queue, item, backfill_ms, paused, next_fire_at, last_fire_at, fires,
      revision, created_at, updated_at)
    VALUES (${s.name}, ${s.source}, ${s.pattern}, ${s.tz}, ${s.everyMs}, ${s.queue}, ${s.itemJson}, ${
      s.backfillMs
    }, 0, ${s.nextFireAt}, NULL, 0, 1, NOW(6), NOW(6))`.execute(exec);
  return affected(r) === 1;
}

/** A schedule's new definition, if its revision is still `revision`; its paused flag and fire history stay. */
export async function updateSchedule(
  exec: Executor,
  t: LedgerTables,
  s: ScheduleRowInput,
  revision: number,
): Promise<boolean> {
  const r =
    await sql`UPDATE ${t.schedules} SET source = ${s.source}, pattern = ${s.pattern}, tz = ${s.tz}, every_ms = ${
      s.everyMs
    }, queue = ${s.queue},
    item = ${s.itemJson}, backfill_ms = ${s.backfillMs}, next_fire_at = ${
      s.nextFireAt
    }, revision = revision + 1, updated_at = NOW(6)
    WHERE name = ${s.name} AND revision = ${revision}`.execute(exec);
  return affected(r) === 1;
}

/** Removes a schedule; false when there was none of that name. */
export async function deleteSchedule(exec: Executor, t: LedgerTables, name: string): Promise<boolean> {
  const r = await sql`DELETE FROM ${t.schedules} WHERE name = ${name}`.execute(exec);
  return affected(r) === 1;
}

/** Pauses or resumes a schedule; false when there is none of that name. */
export async function setSchedulePaused(
  exec: Executor,
  t: LedgerTables,
  name: string,
  paused: boolean,
): Promise<boolean> {
  const r = await sql`UPDATE ${t.schedules} SET paused = ${
    paused ? 1 : 0
  }, revision = revision + 1, updated_at = NOW(6) WHERE name = ${name}`.execute(exec);
  return affected(r) === 1;
}

/**
 * Removes the config file's schedules not named in `keep` (the file no longer declares them); API ones stay. Returns
 * their names.
 */
export async function deleteConfigSchedulesExcept(
  exec: Executor,
  t: LedgerTables,
  keep: readonly string[],
): Promise<string[]> {
  const r = await sql<{ name: string }>`SELECT name FROM ${t.schedules} WHERE source = 'config' ORDER BY name`.execute(
    exec,
  );
  const gone = r.rows.map((x) => x.name).filter((name) => !keep.includes(name));
  if (gone.length === 0) return [];
  await sql`DELETE FROM ${t.schedules} WHERE source = 'config' AND name IN (${sql.join(
    gone.map((n) => sql`${n}`),
  )})`.execute(exec);
  return gone;
}
