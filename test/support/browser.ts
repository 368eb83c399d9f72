import { accessSync, constants } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { describe, test } from 'vitest';
import { underCi } from './ci.js';

/** Debian's chromium (apt-get install chromium; .ci/run installs it when missing). */
export const CHROMIUM_PATH = process.env.LANEWAKE_CHROMIUM ?? '/usr/bin/chromium';

function installed(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * A suite that drives chromium. Without it here, the suite is one skipped test with a note naming the
 * install command, as the promtool tests skip (support/promtool.ts); under CI (LANEWAKE_CI=1, where
 * .ci/run installs it) the suite runs and its launch fails, naming what is missing.
 */
export function describeInChromium(name: string, suite: () => void): void {
  if (installed(CHROMIUM_PATH) || underCi) {
    describe(name, suite);
    return;
  }
  test(name, (ctx) => {
    ctx.skip(
      `chromium is not installed at ${CHROMIUM_PATH} (Debian: apt-get ` +
        `install chromium; or set LANEWAKE_CHROMIUM); .ci/run installs it`,
    );
  });
}

/** A headless chromium with nothing of its own going on: no GPU, sync, updates or background fetches. */
export function launchChromium(): Promise<Browser> {
  if (!installed(CHROMIUM_PATH)) {
    throw new Error(
      `chromium is missing at ${CHROMIUM_PATH} (Debian: apt-get install ` +
        `chromium; or set LANEWAKE_CHROMIUM); .ci/run installs it`,
    );
  }
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}
