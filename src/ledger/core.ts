import { sql } from 'kysely';
import { capabilitiesOnce, type LedgerCapabilities } from './capabilities.js';
import { parseLedgerConfig, type LedgerConfig, type LedgerConfigInput } from './config.js';
import {
  createLedgerPool,
  ensureDatabase,
  ledgerDbOnPool,
  trackPool,
  type LedgerDb,
  type PoolStats,
} from './connection.js';
import { assertSchemaCurrent, migrate, schemaStatus, type MigrateResult, type SchemaStatus } from './migrations.js';
import { MODE_PROOF_VALUES } from './mode-proof.js';
import { ledgerTables, type LedgerTables } from './tables.js';

/**
 * The ledger's connection, schema and clock: what every part of the ledger
 * (rates.ts, fleet.ts, upkeep.ts, queues.ts, finishing.ts, items.ts) writes through.
 */
export class LedgerCore {
  readonly config: LedgerConfig;
  readonly db: LedgerDb;
  readonly tables: LedgerTables;
  /** Connection counts of the ledger's own pool (undefined when given a Kysely instance). */
  readonly pool: Readonly<PoolStats> | undefined;
  protected readonly knownCapabilities: () => Promise<LedgerCapabilities>;

  constructor(config: LedgerConfigInput, db?: LedgerDb) {
    this.config = parseLedgerConfig(config);
    if (db) {
      // Its sessions may read backslashes as text (NO_BACKSLASH_ESCAPES): see mode-proof.ts.
      this.db = db.withPlugin(MODE_PROOF_VALUES);
    } else {
      const pool = createLedgerPool(this.config);
      this.pool = trackPool(pool);
      this.db = ledgerDbOnPool(pool);
    }
    this.tables = ledgerTables(this.config.tablePrefix);
    // Our own pool runs with multipleStatements; a Kysely instance handed in may not.
    this.knownCapabilities = capabilitiesOnce(
      this.db,
      db === undefined ? { conflictsReturned: () => this.conflictsReturnedDb() } : undefined,
    );
  }

  /**
   * What the server and this ledger's connections can do (docs/design/ledger-sql.md):
   * the server's family is asked once, on first need (`SELECT VERSION()`).
   */
  capabilities(): Promise<LedgerCapabilities> {
    return this.knownCapabilities();
  }

  private conflictsReturned: LedgerDb | undefined;

  /**
   * The few connections of LedgerCapabilities.conflictsReturned, opened on first need: half the pool's size
   * (a claim holds one for two statements), at least two.
   */
  private conflictsReturnedDb(): LedgerDb {
    this.conflictsReturned ??= ledgerDbOnPool(
      createLedgerPool(
        { ...this.config, poolSize: Math.max(2, Math.ceil(this.config.poolSize / 2)) },
        { conflictsReturned: true },
      ),
    );
    return this.conflictsReturned;
  }

  /**
   * Creates the ledger's tables, or upgrades them (idempotent). `createDatabase`: first create the
   * URL's database if it does not exist, as `lanewake migrate` does (the user needs CREATE on it).
   */
  async migrate(opts: { createDatabase?: boolean } = {}): Promise<MigrateResult> {
    if (opts.createDatabase === true) await ensureDatabase(this.config.url);
    return migrate(this.db, this.config.tablePrefix);
  }

  schemaStatus(): Promise<SchemaStatus> {
    return schemaStatus(this.db, this.config.tablePrefix);
  }

  assertSchemaCurrent(): Promise<void> {
    return assertSchemaCurrent(this.db, this.config.tablePrefix);
  }

  /** The ledger's clock. */
  async now(): Promise<Date> {
    const r = await sql<{ now: Date }>`SELECT NOW(6) AS now`.execute(this.db);
    const now = r.rows[0]?.now;
    if (!now) throw new Error('ledger clock: no answer');
    return now;
  }

  async close(): Promise<void> {
    await Promise.all([this.db.destroy(), this.conflictsReturned?.destroy()]);
  }
}
