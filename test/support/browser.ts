import { chromium, type Browser } from 'playwright-core';

/** Debian's chromium (apt-get install chromium; .ci/run installs it when missing). */
export const CHROMIUM_PATH = process.env.LANEWAKE_CHROMIUM ?? '/usr/bin/chromium';

/** A headless chromium with nothing of its own going on: no GPU, sync, updates or background fetches. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
}
