import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, test } from 'vitest';

// The docs point readers at files (docs/architecture.md names one per concern): each path they name must exist.
// BENCHMARKS.md is a record of runs, some by probes since removed (it says so), so it is not held to this.
const ROOT = join(import.meta.dirname, '..');

function markdownFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? markdownFiles(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : [],
  );
}

const PATH =
  /(?<![\w/.-])((?:src|bench|chaos|scripts|examples|test|dashboard)\/[\w./-]*\w\.(?:ts|tsx|mjs|sh|md|json))\b/g;

test('every source path the README and the docs name exists', () => {
  const missing: string[] = [];
  for (const file of ['README.md', ...markdownFiles('docs').filter((f) => !f.endsWith('BENCHMARKS.md'))]) {
    for (const [, path] of readFileSync(join(ROOT, file), 'utf8').matchAll(PATH)) {
      if (path !== undefined && !existsSync(join(ROOT, path))) missing.push(`${file}: ${path}`);
    }
  }
  expect([...new Set(missing)]).toEqual([]);
});
