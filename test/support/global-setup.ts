import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { createLedgerTemplate, dropLedgerTemplate } from './ledger-template.js';
import { lintSql, normalizeSql } from './sql-lint.js';

const LOCAL_MYSQL = process.env.LANEWAKE_TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306';
const LOCAL_REDIS = process.env.LANEWAKE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/**
 * By default the suites use the local MariaDB and Redis. With
 * LANEWAKE_TEST_CONTAINERS=1 they run against TiDB and Redis started by
 * testcontainers instead; without a Docker engine that request fails the run
 * (startContainers throws), so a TiDB run never passes on MariaDB.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let teardown = async (): Promise<void> => {};
  let mysqlUrl = LOCAL_MYSQL;
  let redisUrl = LOCAL_REDIS;
  if (process.env.LANEWAKE_TEST_CONTAINERS === '1') {
    const { startContainers } = await import('./containers.js');
    const started = await startContainers();
    mysqlUrl = started.mysqlServerUrl;
    redisUrl = started.redisUrl;
    teardown = started.stop;
  }
  project.provide('mysqlServerUrl', mysqlUrl);
  project.provide('redisUrl', redisUrl);
  const sqlLogDir = mkdtempSync(join(tmpdir(), 'lanewake-sql-'));
  project.provide('sqlLogDir', sqlLogDir);
  const template = await createLedgerTemplate(mysqlUrl);
  project.provide('ledgerTemplate', { database: template.database, tablePrefix: template.tablePrefix });
  const migration = [...new Set(template.statements.map(normalizeSql))];
  writeFileSync(join(sqlLogDir, 'ledger-template.json'), JSON.stringify(migration));
  return async () => {
    await dropLedgerTemplate(mysqlUrl, template.database);
    await teardown();
    lintRecordedSql(sqlLogDir);
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    ledgerTemplate: { database: string; tablePrefix: string };
  }
}

/** Fails the run when a statement the suite sent is outside the SQL subset every server shares (sql-lint.ts). */
function lintRecordedSql(dir: string): void {
  const statements = new Set<string>();
  for (const file of readdirSync(dir)) {
    for (const s of JSON.parse(readFileSync(join(dir, file), 'utf8')) as string[]) statements.add(s);
  }
  rmSync(dir, { recursive: true, force: true });
  const violations = lintSql(statements);
  if (violations.length === 0) return;
  const lines = violations.map((v) => `  [${v.rule}] ${v.why}\n    ${v.statement.slice(0, 400)}`);
  // An error thrown here is printed but does not fail the run: set the exit code as well.
  process.exitCode = 1;
  console.error(
    `\nSQL lint FAILED: ${violations.length} statement(s) of ${statements.size} outside the SQL subset every ` +
      `server shares:\n${lines.join('\n')}\n`,
  );
}
