import { createRequire } from 'node:module';

/** This package's version (src/version.ts and dist/version.js both sit one level below package.json). */
export function packageVersion(): string {
  try {
    const pkg = createRequire(import.meta.url)('../package.json') as { version?: unknown };
    return typeof pkg.version === 'string' ? pkg.version : '0.0.0';
  } catch {
    return '0.0.0';
  }
}
