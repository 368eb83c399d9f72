import { setLogDestination } from '../../src/log.js';

/**
 * The library's loggers write through the console here, which vitest
 * captures per test: with `silent: 'passed-only'` a failing test shows its
 * log lines and a passing one shows none.
 */
setLogDestination({
  write(line: string): void {
    console.error(line.trimEnd());
  },
});
