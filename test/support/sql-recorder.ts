import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mysql from 'mysql2';
import { afterAll, inject } from 'vitest';
import { normalizeSql } from './sql-lint.js';

/**
 * Records every statement this test file's process sends over mysql2 (the
 * ledger's, the tests' own, the admin ones), normalized so each shape counts
 * once, and writes them where global-setup.ts lints them after the run. The
 * driver is observed, not replaced: each call goes on to the real query.
 */
const seen = new Set<string>();
const dir = inject('sqlLogDir');

type QueryFn = (this: unknown, sql: unknown, ...rest: unknown[]) => unknown;
const base = Object.getPrototypeOf(mysql.Connection.prototype) as { query: QueryFn; execute: QueryFn };
for (const method of ['query', 'execute'] as const) {
  const original = base[method];
  base[method] = function (this: unknown, sql: unknown, ...rest: unknown[]) {
    const text = typeof sql === 'string' ? sql : typeof sql === 'object' && sql !== null && 'sql' in sql ? String((sql as { sql: unknown }).sql) : undefined;
    if (text !== undefined && seen.size < 50_000) seen.add(normalizeSql(text));
    return original.call(this, sql, ...rest);
  };
}

afterAll(() => {
  if (seen.size === 0) return;
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${process.pid}-${randomBytes(4).toString('hex')}.json`), JSON.stringify([...seen]));
});

declare module 'vitest' {
  export interface ProvidedContext {
    sqlLogDir: string;
  }
}
