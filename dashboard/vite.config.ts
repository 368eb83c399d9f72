import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The operator dashboard (docs/operations/observing.md, "Dashboard"): bundled into dist/dashboard/ and served as static
// files by the admin server under a strict CSP, so everything (scripts and CSS) is a file of its own.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: './',
  publicDir: false,
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: fileURLToPath(new URL('../dist/dashboard/', import.meta.url)),
    emptyOutDir: true,
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    target: 'es2022',
  },
});
