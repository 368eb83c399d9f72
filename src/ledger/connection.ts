import { Kysely, MysqlDialect } from 'kysely';
import { createPool, type Pool, type PoolOptions } from 'mysql2';
import type { LedgerConfig } from './config.js';

/**
 * Session settings every ledger connection needs:
 * - UTC, so DATETIME(6) values written from and read into JS Dates mean the
 *   same instant as NOW(6);
 * - READ COMMITTED, so lane bookkeeping reads what other transactions have
 *   committed after it locked the lane row, and InnoDB takes no gap locks.
 */
const SESSION_SETUP = [
  "SET SESSION time_zone = '+00:00'",
  'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED',
];

export function mysqlPoolOptions(config: Pick<LedgerConfig, 'url' | 'poolSize'>): PoolOptions {
  const url = new URL(config.url);
  return {
    host: url.hostname,
    port: url.port ? Number(url.port) : 3306,
    user: decodeURIComponent(url.username || 'root'),
    password: decodeURIComponent(url.password),
    database: decodeURIComponent(url.pathname.slice(1)),
    connectionLimit: config.poolSize,
    timezone: 'Z',
    supportBigNumbers: true,
    bigNumberStrings: false,
    dateStrings: false,
    charset: 'utf8mb4_bin',
    enableKeepAlive: true,
  };
}

export function createLedgerPool(config: Pick<LedgerConfig, 'url' | 'poolSize'>): Pool {
  const pool = createPool(mysqlPoolOptions(config));
  pool.on('connection', (connection) => {
    for (const statement of SESSION_SETUP) connection.query(statement);
  });
  return pool;
}

/** The ledger's own tables are reached through raw `sql` with a table prefix, so the DB type is open. */
export type LedgerDb = Kysely<Record<string, never>>;

export function createLedgerDb(config: Pick<LedgerConfig, 'url' | 'poolSize'>): LedgerDb {
  return new Kysely<Record<string, never>>({
    dialect: new MysqlDialect({ pool: createLedgerPool(config) }),
  });
}
