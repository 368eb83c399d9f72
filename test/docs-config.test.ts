import { readFile } from 'node:fs/promises';
import { expect, test } from 'vitest';
import { CONFIG_DOCS_PATH, renderConfigDocs } from '../scripts/docs-config.js';

test('docs/configuration.md is what the schemas generate', async () => {
  const checkedIn = await readFile(CONFIG_DOCS_PATH, 'utf8').catch(() => '');
  expect(checkedIn, 'docs/configuration.md is stale: run `npm run docs:config` and check the result in').toBe(
    renderConfigDocs(),
  );
});
