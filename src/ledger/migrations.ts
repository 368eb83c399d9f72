import { sql } from 'kysely';
import { SchemaBehindError } from '../errors.js';
import type { LedgerDb } from './connection.js';
import { retryOnConflict } from './retry.js';
import { MIGRATIONS } from './migration-steps.js';
import { ledgerTables, type LedgerTables } from './tables.js';

export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]?.version ?? 0;

export interface MigrateResult {
  from: number;
  to: number;
  applied: number[];
}

/**
 * Brings the schema to SCHEMA_VERSION (or to `toVersion`, which tests of an
 * upgrade use to make an older schema). Safe to run twice and from several
 * processes at once: a named server lock serialises runners, and every step
 * is idempotent.
 */
export async function migrate(
  db: LedgerDb,
  prefix: string,
  lockTimeoutS = 60,
  toVersion = SCHEMA_VERSION,
): Promise<MigrateResult> {
  const t = ledgerTables(prefix);
  return db.connection().execute(async (conn) => {
    const lockName = `lanewake:migrate:${prefix}`;
    // TiDB keeps named locks in a table of its own: runners queued on one may be told
    // `pessimistic lock retry limit reached` when it is let go, having taken nothing; they ask again.
    const got = await retryOnConflict(() =>
      sql<{ ok: number | null }>`SELECT GET_LOCK(CONCAT(DATABASE(), ${':' + lockName}), ${lockTimeoutS}) AS ok`.execute(
        conn,
      ),
    );
    if (got.rows[0]?.ok !== 1) throw new Error(`could not take the migration lock within ${lockTimeoutS}s`);
    try {
      await sql`CREATE TABLE IF NOT EXISTS ${t.migrations} (
        version INT NOT NULL PRIMARY KEY,
        name VARCHAR(200) NOT NULL,
        applied_at DATETIME(6) NOT NULL
      ) ENGINE=InnoDB`.execute(conn);
      const from = await readVersion(conn, t);
      const applied: number[] = [];
      for (const m of MIGRATIONS) {
        if (m.version <= from || m.version > toVersion) continue;
        for (const statement of m.statements(t)) await statement.execute(conn);
        await m.run?.(conn, t, prefix);
        await sql`INSERT INTO ${t.migrations} (version, name, applied_at) VALUES (${m.version}, ${
          m.name
        }, UTC_TIMESTAMP(6))
          ON DUPLICATE KEY UPDATE name = ${m.name}`.execute(conn);
        applied.push(m.version);
      }
      return { from, to: Math.max(from, toVersion), applied };
    } finally {
      await sql`SELECT RELEASE_LOCK(CONCAT(DATABASE(), ${':' + lockName}))`.execute(conn);
    }
  });
}

async function readVersion(conn: LedgerDb, t: LedgerTables): Promise<number> {
  const r = await sql<{ v: number | null }>`SELECT MAX(version) AS v FROM ${t.migrations}`.execute(conn);
  return Number(r.rows[0]?.v ?? 0);
}

export interface SchemaStatus {
  current: number;
  required: number;
  behind: boolean;
}

export async function schemaStatus(db: LedgerDb, prefix: string): Promise<SchemaStatus> {
  const t = ledgerTables(prefix);
  const exists = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM information_schema.tables
    WHERE table_schema = DATABASE() AND table_name = ${prefix + 'migrations'}`.execute(db);
  const current = Number(exists.rows[0]?.n ?? 0) > 0 ? await readVersion(db, t) : 0;
  return { current, required: SCHEMA_VERSION, behind: current < SCHEMA_VERSION };
}

/** Throws SchemaBehindError when the database is older than this build. */
export async function assertSchemaCurrent(db: LedgerDb, prefix: string): Promise<void> {
  const status = await schemaStatus(db, prefix);
  if (status.behind) throw new SchemaBehindError(status.current, status.required);
}
