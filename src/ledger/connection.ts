import { Kysely, MysqlDialect, type MysqlPool, type MysqlPoolConnection, type QueryExecutorProvider } from 'kysely';
import mysql2, { createPool, type Pool, type PoolConnection, type PoolOptions } from 'mysql2';
import { sleep } from '../sleep.js';
import { formatValues } from './mode-proof.js';
import { ValidationError } from '../errors.js';
import type { LedgerConfig } from './config.js';

/**
 * Session settings every ledger connection needs:
 * - UTC, so DATETIME(6) values written from and read into JS Dates mean the
 *   same instant as NOW(6);
 * - READ COMMITTED, so lane bookkeeping reads what other transactions have
 *   committed after it locked the lane row, and InnoDB takes no gap locks;
 * - backslash escapes in string literals, as mysql2 and Kysely expect of a
 *   session. The ledger's own values need no mode (sql/common/fragments.ts,
 *   `literal`: it writes no backslash), but a statement text still reads
 *   the same whatever the server's default. The rest of its sql_mode stays;
 * - on TiDB, no statement waits to load statistics while it is planned
 *   (`tidb_stats_load_sync_wait = 0`; TiDB's default waits for them):
 *   the ledger's tables churn, so their statistics are often missing or
 *   stale, and the statements on its paths name their index or key. With
 *   the wait, every completion and lane hand-on of a fresh ledger waited in
 *   it, holding its locks (docs/BENCHMARKS.md);
 * - on TiDB, a cached plan for a prepared statement whose primary-key `IN`
 *   list has several values (`tidb_opt_fix_control = '44830:ON'`): without
 *   it TiDB plans a claim's CAS and read-back, and a batch's completion,
 *   anew on every execution (sql/common/bound.ts).
 */
/**
 * What every connection of the ledger's pool runs first. The transaction
 * mode goes in a TiDB executable comment (`/*T! … *\/`): TiDB runs what is
 * inside, MariaDB and MySQL read a comment. It is set either way, so a
 * cluster whose global default is optimistic still gets the mode asked for.
 * The dive limit goes in a MariaDB one (`/*M! … *\/`), a comment to MySQL
 * and TiDB.
 */
export function sessionSetup(config: Pick<LedgerConfig, 'tidbTxnMode'>): string[] {
  return [
    `SET SESSION time_zone = '+00:00' /*T! , tidb_txn_mode = '${
      config.tidbTxnMode
    }', tidb_stats_load_sync_wait = 0, tidb_opt_fix_control = '44830:ON' */`,
    'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED',
    "SET SESSION sql_mode = TRIM(BOTH ',' FROM REPLACE(CONCAT(',', @@SESSION.sql_mode, ','), " +
      "',NO_BACKSLASH_ESCAPES,', ','))",
  ];
}

/** Dates bound as parameters are written as UTC, matching the session time zone. */
const POOL_TIME_ZONE = 'Z';

export function mysqlPoolOptions(config: Pick<LedgerConfig, 'url' | 'poolSize'>): PoolOptions {
  const url = new URL(config.url);
  return {
    host: url.hostname,
    port: url.port ? Number(url.port) : 3306,
    user: decodeURIComponent(url.username || 'root'),
    password: decodeURIComponent(url.password),
    database: decodeURIComponent(url.pathname.slice(1)),
    connectionLimit: config.poolSize,
    timezone: POOL_TIME_ZONE,
    supportBigNumbers: true,
    bigNumberStrings: false,
    dateStrings: false,
    charset: 'utf8mb4_bin',
    enableKeepAlive: true,
    // A claim sends its CAS and read-back as one query (sql/claim/cas.ts). Every
    // value reaches SQL as a parameter or as a mode-proof literal (`literal`).
    multipleStatements: true,
    // Strings in the text as `literal` writes them; with no values the text as it is (mode-proof.ts).
    queryFormat: formatValues(POOL_TIME_ZONE),
  };
}

/**
 * The settings of a session whose autocommit writes come back with TiDB's
 * write conflict (9007) instead of being run again by TiDB, pessimistically,
 * waiting on the rows' locks: the claim's CAS (sql/claim/cas.ts) claims again
 * from a fresh candidate read instead. Not for the ledger's pool as a whole:
 * its other autocommit writes (renewals, heartbeats, cancellations) expect
 * TiDB to settle a conflict for them. TiDB only.
 */
const CONFLICTS_RETURNED_SETUP = 'SET SESSION tidb_retry_limit = 0';

export function createLedgerPool(
  config: Pick<LedgerConfig, 'url' | 'poolSize' | 'tidbTxnMode'>,
  opts: { conflictsReturned?: boolean } = {},
): Pool {
  const pool = createPool(mysqlPoolOptions(config));
  // One round trip for all of it: the pool takes several statements per query, and a new
  // connection's first query waits behind its setup.
  const setup = [...sessionSetup(config), ...(opts.conflictsReturned === true ? [CONFLICTS_RETURNED_SETUP] : [])].join(
    '; ',
  );
  pool.on('connection', (connection) => {
    connection.query(setup);
  });
  return pool;
}

/** The ledger's own tables are reached through raw `sql` with a table prefix, so the DB type is open. */
export type LedgerDb = Kysely<Record<string, never>>;

/** Anything a statement can run on: the pool, a Kysely transaction, a single connection. */
export type Executor = QueryExecutorProvider;

export function ledgerDbOnPool(pool: Pool): LedgerDb {
  return new Kysely<Record<string, never>>({ dialect: new MysqlDialect({ pool: preparingWhenMarked(pool) }) });
}

/**
 * The first words of a statement the ledger's pool sends prepared, on the
 * binary protocol, instead of as text (sql/common/bound.ts). A comment: where it is
 * not the first thing in a query (several statements in one round trip),
 * the query goes as text with its values escaped in.
 */
export const PREPARED_MARK = '/* lw:prepared */ ';

/**
 * The pool as Kysely sees it, except that a statement that starts with
 * PREPARED_MARK (sql/common/bound.ts) goes out prepared, on the binary protocol
 * (`execute`), and not as text (`query`). mysql2 prepares each text once per
 * connection and keeps it; the server caches the plan of a prepared
 * statement, which on TiDB is most of what a hot statement costs it.
 */
function preparingWhenMarked(pool: Pool): MysqlPool {
  const wrapped = new WeakMap<PoolConnection, MysqlPoolConnection>();
  const wrap = (connection: PoolConnection): MysqlPoolConnection => {
    const known = wrapped.get(connection);
    if (known !== undefined) return known;
    const proxy = new Proxy(connection, {
      get(target, property) {
        if (property === 'query') {
          return (text: string, values: unknown[], callback?: (error: unknown, result: unknown) => void) =>
            callback !== undefined && text.startsWith(PREPARED_MARK) && values.length > 0
              ? target.execute(text, values.map(asParameter) as never, callback)
              : callback !== undefined
                ? target.query(text, values, callback)
                : target.query(text, values);
        }
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    }) as unknown as MysqlPoolConnection;
    wrapped.set(connection, proxy);
    return proxy;
  };
  return {
    getConnection: (callback) =>
      pool.getConnection((error, connection) => callback(error, error ? (connection as never) : wrap(connection))),
    end: (callback) => pool.end(callback),
  };
}

/**
 * A value bound to a prepared statement. mysql2 sends a JS number as a
 * DOUBLE, and TiDB caches no plan that compares an integer column with a
 * DOUBLE parameter ("may be converted to INT"): a lane's sequence, say. An
 * integer goes as a BIGINT instead.
 */
function asParameter(value: unknown): unknown {
  // mysql2 defines TypedParameter as a getter on its CommonJS exports, which Node's ESM named imports do not see.
  return typeof value === 'number' && Number.isSafeInteger(value) ? mysql2.TypedParameter.BIGINT(value) : value;
}

/**
 * Creates the database named in `url` if it does not exist yet, connecting
 * to the server without a default database. Retries while the server is
 * still starting (a fresh container), up to `waitMs`.
 */
export async function ensureDatabase(url: string, waitMs = 60_000): Promise<void> {
  const { connectionLimit: _unused, database: maybeDatabase, ...server } = mysqlPoolOptions({ url, poolSize: 1 });
  const database = maybeDatabase ?? '';
  if (!/^[A-Za-z0-9_$-]{1,64}$/.test(database)) {
    // Bad input, named as the field it came from: the name is written into CREATE DATABASE unquoted by the driver.
    throw new ValidationError(
      [
        {
          field: 'url',
          message: `its database name ${JSON.stringify(
            database,
          )} is not a plain identifier: use 1-64 letters, digits, _, $ or -`,
        },
      ],
      'ensureDatabase',
    );
  }
  const { createConnection } = await import('mysql2/promise');
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      const conn = await createConnection(server);
      try {
        await conn.query(`CREATE DATABASE IF NOT EXISTS \`${database}\``);
        return;
      } finally {
        await conn.end();
      }
    } catch (error) {
      const code = (error as { code?: string }).code;
      const transient = code === 'ECONNREFUSED' || code === 'PROTOCOL_CONNECTION_LOST' || code === 'ETIMEDOUT';
      if (!transient || Date.now() > deadline) throw error;
      await sleep(500, { keepAlive: true });
    }
  }
}

/** Live counts of a ledger pool's connections, kept from mysql2's pool events. */
export interface PoolStats {
  /** Open connections. */
  total: number;
  /** Connections lent out to a query or transaction right now. */
  inUse: number;
  /** Requests queued for a free connection right now. */
  waiting: number;
}

export function trackPool(pool: Pool): PoolStats {
  const stats: PoolStats = { total: 0, inUse: 0, waiting: 0 };
  pool.on('connection', (connection) => {
    stats.total++;
    connection.once('end', () => (stats.total = Math.max(0, stats.total - 1)));
  });
  pool.on('enqueue', () => stats.waiting++);
  pool.on('acquire', () => {
    stats.inUse++;
    stats.waiting = Math.max(0, stats.waiting - 1);
  });
  pool.on('release', () => (stats.inUse = Math.max(0, stats.inUse - 1)));
  return stats;
}
