import { spawnSync } from 'node:child_process';
import type { TestContext } from 'vitest';
import { underCi } from './ci.js';

const version = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
const installed = version.error === undefined && version.status === 0;

/**
 * Skips the test when promtool (Debian's prometheus package) is not
 * installed here, with a note saying so; under CI (.ci/run sets
 * LANEWAKE_CI=1, and installs it) its absence fails the test instead.
 */
export function needPromtool(ctx: TestContext): void {
  if (installed) return;
  if (underCi) throw new Error('promtool is missing under CI: .ci/run installs it (apt-get install prometheus)');
  ctx.skip('promtool is not installed (Debian: apt-get install prometheus); .ci/run installs it');
}

/** Runs promtool with `args`, `input` on its stdin: its exit status and everything it printed. */
export function promtool(args: string[], input = ''): { status: number | null; output: string } {
  const r = spawnSync('promtool', args, { input, encoding: 'utf8' });
  return { status: r.status, output: `${r.stdout}${r.stderr}`.trim() };
}
