/** Drain: at a consumer's stop, its running handlers finish, or are aborted, then abandoned. */
import type { Logger } from '../log.js';
import { sleep } from '../sleep.js';
import type { RunningJob } from './job-run.js';

/**
 * Waits up to `drainMs` for running handlers and outcomes being written;
 * then aborts the handlers still running, waits up to `abortGraceMs` for
 * them to settle, and abandons the rest (their leases are left to expire).
 */
export async function drainSlots(
  slots: { readonly running: ReadonlyMap<string, RunningJob>; readonly finishing: ReadonlyMap<string, RunningJob> },
  drainMs: number,
  abortGraceMs: number,
  log: Logger,
): Promise<void> {
  const { running, finishing } = slots;
  const settled = () => Promise.allSettled([...running.values(), ...finishing.values()].map((r) => r.done));
  if (running.size + finishing.size > 0) await Promise.race([settled(), sleep(drainMs)]);
  if (running.size > 0) {
    log.warn({ inFlight: running.size }, 'drain timeout: aborting in-flight handlers');
    for (const r of running.values()) r.abort('shutdown');
    await Promise.race([settled(), sleep(abortGraceMs)]);
    for (const r of running.values()) r.abandon();
    await settled();
  }
}
