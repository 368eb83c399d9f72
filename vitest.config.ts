import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
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
