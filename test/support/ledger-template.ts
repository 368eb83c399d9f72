import { randomBytes } from 'node:crypto';
import { type Connection, createConnection } from 'mysql2/promise';
import { Ledger } from '../../src/ledger/ledger.js';
import { onEveryStatement } from './mysql-statements.js';

/**
 * A database migrated once per run (global-setup.ts), that each test's fresh database copies: one
 * `CREATE TABLE … LIKE` per table and its rows, instead of every migration step: TiDB runs DDL one job at a
 * time and an ALTER as several schema versions, so migrating each test's database is slow there.
 * test/ledger-migrations.test.ts checks that a copy's tables are the migration's.
 */
export interface LedgerTemplate {
  database: string;
  /** The table prefix it was migrated with (the default). */
  tablePrefix: string;
  /** The statements the migration sent, for the SQL lint (the workers' recorder does not see them). */
  statements: string[];
}

/** A connection to the server `serverUrl` names, without a default database. */
export async function serverConnection(serverUrl: string): Promise<Connection> {
  const u = new URL(serverUrl);
  return createConnection({
    host: u.hostname,
    port: Number(u.port || 3306),
    user: decodeURIComponent(u.username || 'root'),
    password: decodeURIComponent(u.password),
  });
}

/** Creates and migrates the template database on the server `serverUrl` names (no database in it). */
export async function createLedgerTemplate(serverUrl: string): Promise<LedgerTemplate> {
  const database = `lwt_tpl_${randomBytes(6).toString('hex')}`;
  const statements: string[] = [];
  let tablePrefix = '';
  const stop = onEveryStatement((s) => void statements.push(s));
  try {
    const c = await serverConnection(serverUrl);
    try {
      await c.query(`CREATE DATABASE \`${database}\``);
    } finally {
      await c.end();
    }
    const ledger = new Ledger({ url: `${serverUrl.replace(/\/$/, '')}/${database}`, poolSize: 1 });
    tablePrefix = ledger.config.tablePrefix;
    try {
      await ledger.migrate();
    } finally {
      await ledger.close();
    }
  } finally {
    stop();
  }
  return { database, tablePrefix, statements };
}

export async function dropLedgerTemplate(serverUrl: string, database: string): Promise<void> {
  const c = await serverConnection(serverUrl);
  try {
    await c.query(`DROP DATABASE IF EXISTS \`${database}\``);
  } finally {
    await c.end();
  }
}

/** Whether a test ledger of this config can be a copy of the template (made with the default table prefix). */
export function templateFits(template: Pick<LedgerTemplate, 'tablePrefix'>, config: { tablePrefix?: string }): boolean {
  return config.tablePrefix === undefined || config.tablePrefix === template.tablePrefix;
}

interface TemplateTables {
  all: string[];
  withRows: string[];
}
let tables: Promise<TemplateTables> | undefined;

function templateTables(c: Connection, template: string): Promise<TemplateTables> {
  tables ??= (async () => {
    const [rows] = await c.query('SELECT table_name AS name FROM information_schema.tables WHERE table_schema = ?', [
      template,
    ]);
    const all = (rows as { name: string }[]).map((r) => r.name).sort();
    const withRows: string[] = [];
    for (const name of all) {
      const [found] = await c.query(`SELECT 1 AS one FROM \`${template}\`.\`${name}\` LIMIT 1`);
      if ((found as unknown[]).length > 0) withRows.push(name);
    }
    return { all, withRows };
  })();
  return tables;
}

/** Fills the empty database `database` with the template's tables and their rows. */
export async function copyTemplate(c: Connection, template: string, database: string): Promise<void> {
  const { all, withRows } = await templateTables(c, template);
  if (all.length === 0) throw new Error(`the ledger template ${template} has no tables`);
  for (const name of all) await c.query(`CREATE TABLE \`${database}\`.\`${name}\` LIKE \`${template}\`.\`${name}\``);
  for (const name of withRows)
    await c.query(`INSERT INTO \`${database}\`.\`${name}\` SELECT * FROM \`${template}\`.\`${name}\``);
}
