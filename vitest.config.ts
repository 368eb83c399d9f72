import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // lanewake and lanewake/testing as users import them (package.json exports → dist/); here, their source
  // (examples/ import them), so that one copy of each class (BlockOnError, …) is loaded, not the source's and dist's.
  resolve: {
    alias: [
      { find: /^lanewake\/testing$/, replacement: fileURLToPath(new URL('./src/testing/index.ts', import.meta.url)) },
      { find: /^lanewake$/, replacement: fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    // Compile-time tests (expectTypeOf, @ts-expect-error) of *.test-d.ts, run by tsc: `npm test` passes --typecheck
    // (`npx vitest run --typecheck test/typed-jobs.test-d.ts` alone); without it, as for a single
    // runtime file, no tsc runs.
    typecheck: { include: ['test/**/*.test-d.ts'], tsconfig: './tsconfig.typecheck.json' },
    globalSetup: ['test/support/global-setup.ts'],
    setupFiles: ['test/support/log-capture.ts', 'test/support/sql-recorder.ts'],
    // Logs (console and the library's loggers, see log-capture.ts) appear only for a failing test.
    silent: 'passed-only',
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
  },
});
