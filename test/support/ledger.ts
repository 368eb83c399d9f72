import { randomBytes } from 'node:crypto';
import { Kysely, MysqlDialect } from 'kysely';
import { createPool } from 'mysql2';
import type { Connection } from 'mysql2/promise';
import { mysqlPoolOptions, type LedgerDb } from '../../src/ledger/connection.js';
import { Ledger } from '../../src/ledger/ledger.js';
import type { LedgerConfigInput } from '../../src/ledger/config.js';
import { inject } from 'vitest';
import { copyTemplate, serverConnection, templateFits } from './ledger-template.js';
import { mysqlServerUrl } from './services.js';

export interface TestLedger {
  ledger: Ledger;
  database: string;
  url: string;
  drop: () => Promise<void>;
}

async function admin<T>(fn: (c: Connection) => Promise<T>): Promise<T> {
  const c = await serverConnection(mysqlServerUrl());
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** The suite's server's `SELECT VERSION()`. */
export function serverVersion(): Promise<string> {
  return admin(async (c) => {
    const [rows] = await c.query('SELECT VERSION() AS v');
    return String((rows as { v: string }[])[0]?.v ?? '');
  });
}

/** `npm run test:tidb` runs the ledger suites a second time with LANEWAKE_TEST_TIDB_TXN_MODE=optimistic. */
export function testTxnMode(): Pick<LedgerConfigInput, 'tidbTxnMode'> {
  const mode = process.env.LANEWAKE_TEST_TIDB_TXN_MODE;
  if (mode === undefined || mode === '') return {};
  if (mode !== 'pessimistic' && mode !== 'optimistic')
    throw new Error(`LANEWAKE_TEST_TIDB_TXN_MODE must be pessimistic or optimistic, not ${mode}`);
  return { tidbTxnMode: mode };
}

/** Drops `database` if it exists (one a test named for something else to create). */
export async function dropDatabase(database: string): Promise<void> {
  await admin((c) => c.query(`DROP DATABASE IF EXISTS \`${database}\``));
}

/**
 * A database of its own, migrated (a copy of the run's migrated template, ledger-template.ts, when the
 * table prefix is the template's); `drop()` closes the pool and drops it.
 */
export async function createTestLedger(config: Partial<LedgerConfigInput> = {}, migrate = true): Promise<TestLedger> {
  const database = `lwt_${randomBytes(6).toString('hex')}`;
  const template = inject('ledgerTemplate');
  const copy = migrate && templateFits(template, config);
  await admin(async (c) => {
    await c.query(`CREATE DATABASE \`${database}\``);
    if (copy) await copyTemplate(c, template.database, database);
  });
  const url = `${mysqlServerUrl().replace(/\/$/, '')}/${database}`;
  const ledger = new Ledger({ url, poolSize: 8, ...testTxnMode(), ...config });
  if (migrate && !copy) await ledger.migrate();
  return {
    ledger,
    database,
    url,
    drop: async () => {
      await ledger.close().catch(() => undefined);
      await admin((c) => c.query(`DROP DATABASE IF EXISTS \`${database}\``));
    },
  };
}

/** Waits until `check` returns a value other than undefined/false, or fails after `timeoutMs`. */
export async function waitFor<T>(
  check: () => Promise<T | undefined | false> | T | undefined | false,
  timeoutMs = 10_000,
  what = 'condition',
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Waits until `count()` reaches `target`, failing only when the count has
 * not moved for `stallMs`: for a test whose work takes as long as the
 * machine and its server need (a loaded TiDB drains a backlog at a tenth of
 * MariaDB's rate), a deadline on the whole would assert a speed.
 */
export async function waitForCount(
  count: () => Promise<number>,
  target: number,
  stallMs: number,
  what: string,
): Promise<void> {
  let last = -1;
  let movedAt = Date.now();
  for (;;) {
    const n = await count();
    if (n >= target) return;
    if (n !== last) {
      last = n;
      movedAt = Date.now();
    } else if (Date.now() - movedAt > stallMs) {
      throw new Error(`${what}: stuck at ${n} of ${target} for ${stallMs} ms`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * A Ledger on a Kysely instance handed in, whose pool refuses several
 * statements per query (as a caller's own pool may): the ledger then sends
 * one statement per round trip. Close it yourself.
 */
export function ledgerOnPlainPool(url: string, poolSize = 2): Ledger {
  const { multipleStatements: _dropped, ...options } = mysqlPoolOptions({ url, poolSize });
  const pool = createPool({ ...options, multipleStatements: false });
  const db: LedgerDb = new Kysely<Record<string, never>>({ dialect: new MysqlDialect({ pool }) });
  return new Ledger({ url }, db);
}
