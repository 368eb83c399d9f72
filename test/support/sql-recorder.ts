import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, inject } from 'vitest';
import { onEveryStatement } from './mysql-statements.js';
import { normalizeSql } from './sql-lint.js';

/**
 * Records every statement this test file's process sends over mysql2 (the
 * ledger's, the tests' own, the admin ones), normalized so each shape counts
 * once, and writes them where global-setup.ts lints them after the run.
 */
const seen = new Set<string>();
const dir = inject('sqlLogDir');

onEveryStatement((text) => {
  if (seen.size < 50_000) seen.add(normalizeSql(text));
});

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
