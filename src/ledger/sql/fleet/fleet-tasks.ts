import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { affected, NO_TIME } from '../common/fragments.js';

/** A fleet task's row: when it was last done and what it found (JSON), or undefined before its first run. */
export interface FleetTaskRow {
  doneAt: Date | null;
  result: string | null;
}

export async function readFleetTask(db: LedgerDb, t: LedgerTables, name: string): Promise<FleetTaskRow | undefined> {
  const r = await sql<{
    done_at: Date;
    result: string | null;
  }>`SELECT done_at, result FROM ${t.fleetTasks} WHERE name = ${name}`.execute(db);
  const row = r.rows[0];
  if (!row) return undefined;
  return { doneAt: row.done_at.getTime() <= NO_TIME_MS ? null : row.done_at, result: row.result };
}
const NO_TIME_MS = Date.UTC(1001, 0, 1);

/**
 * Takes the task for `holder` for `leaseMs` if it is due (last done more
 * than `everyMs` ago, or never) and nobody else holds it: one CAS, so of the
 * replicas that try at once exactly one gets it. The row is made on first
 * use (INSERT IGNORE: a racing maker's insert is a no-op).
 */
export async function takeFleetTask(
  db: LedgerDb,
  t: LedgerTables,
  spec: { name: string; holder: string; leaseMs: number; everyMs: number },
): Promise<boolean> {
  await sql`INSERT IGNORE INTO ${t.fleetTasks} (name, holder, lease_until, done_at, result) VALUES (${spec.name}, '', ${
    NO_TIME
  }, ${NO_TIME}, NULL)`.execute(db);
  const r = await sql`UPDATE ${t.fleetTasks} SET holder = ${spec.holder}, lease_until = NOW(6) + INTERVAL ${sql.raw(
    String(spec.leaseMs * 1000),
  )} MICROSECOND
    WHERE name = ${spec.name} AND lease_until < NOW(6) AND done_at < NOW(6) - INTERVAL ${sql.raw(
      String(spec.everyMs * 1000),
    )} MICROSECOND`.execute(db);
  return affected(r) === 1;
}

/** Records what the task found and frees its lease; only its holder's write counts. */
export async function finishFleetTask(
  db: LedgerDb,
  t: LedgerTables,
  spec: { name: string; holder: string; result: string },
): Promise<boolean> {
  const r = await sql`UPDATE ${t.fleetTasks} SET done_at = NOW(6), result = ${spec.result}, lease_until = ${NO_TIME}
    WHERE name = ${spec.name} AND holder = ${spec.holder} AND lease_until >= NOW(6)`.execute(db);
  return affected(r) === 1;
}

/**
 * A standing lease (one row of the fleet tasks, its done_at unused): taken
 * by `holder` when it has run out, kept by its holder, and in both cases
 * extended to `leaseMs` from the ledger's now. One CAS, so of the replicas
 * that try at once exactly one holds it. Steady state is one statement; the
 * row is made on first use.
 */
export async function holdFleetLease(
  db: LedgerDb,
  t: LedgerTables,
  spec: { name: string; holder: string; leaseMs: number },
): Promise<boolean> {
  const take = (): Promise<{ numAffectedRows?: bigint }> =>
    sql`UPDATE ${t.fleetTasks} SET holder = ${spec.holder}, lease_until = NOW(6) + INTERVAL ${sql.raw(
      String(spec.leaseMs * 1000),
    )} MICROSECOND
      WHERE name = ${spec.name} AND (holder = ${spec.holder} OR lease_until < NOW(6))`.execute(db);
  if (affected(await take()) === 1) return true;
  const made = await sql`INSERT IGNORE INTO ${t.fleetTasks} (name, holder, lease_until, done_at, result) VALUES (${
    spec.name
  }, '', ${NO_TIME}, ${NO_TIME}, NULL)`.execute(db);
  return affected(made) === 1 && affected(await take()) === 1;
}

/** Ends `holder`'s standing lease now, so another replica may take it at its next try; a no-op for anyone else. */
export async function releaseFleetLease(
  db: LedgerDb,
  t: LedgerTables,
  spec: { name: string; holder: string },
): Promise<void> {
  await sql`UPDATE ${t.fleetTasks} SET lease_until = ${NO_TIME} WHERE name = ${spec.name} AND holder = ${
    spec.holder
  }`.execute(db);
}
