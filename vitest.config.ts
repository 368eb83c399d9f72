import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // lanewake/testing as users import it (package.json exports → dist/testing); here, its source.
  resolve: { alias: { 'lanewake/testing': fileURLToPath(new URL('./src/testing/index.ts', import.meta.url)) } },
  test: {
    include: ['test/**/*.test.ts'],
    // Compile-time tests (expectTypeOf, @ts-expect-error) of *.test-d.ts, run by tsc: `npm test` passes --typecheck
    // (`npx vitest run --typecheck test/typed-jobs.test-d.ts` alone); without it, as for a single runtime file, no tsc runs.
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
