import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

// examples/*.test.ts as a user's suite of their own (test/doc-examples.test.ts runs it): lanewake is this source.
const src = (path: string): string => fileURLToPath(new URL(`../../src/${path}`, import.meta.url));

export default defineConfig({
  root: fileURLToPath(new URL('../..', import.meta.url)),
  resolve: {
    alias: [
      { find: /^lanewake\/testing$/, replacement: src('testing/index.ts') },
      { find: /^lanewake$/, replacement: src('index.ts') },
    ],
  },
  test: { include: ['examples/**/*.test.ts'], testTimeout: 300_000, hookTimeout: 300_000 },
});
