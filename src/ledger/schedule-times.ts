import { createRequire } from 'node:module';

type CronParser = typeof import('cron-parser').CronExpressionParser;
let cronParser: CronParser | undefined;
/**
 * cron-parser (and luxon under it, ~8 MB of RSS) is loaded when a cron
 * pattern is first read, not by every process that imports lanewake; it is
 * CommonJS, so a synchronous require keeps these functions synchronous.
 */
function cron(): CronParser {
  cronParser ??= (createRequire(import.meta.url)('cron-parser') as typeof import('cron-parser')).CronExpressionParser;
  return cronParser;
}

/** The timing half of a schedule: a cron pattern in a time zone, or an interval. */
export interface ScheduleTiming {
  pattern: string | null;
  tz: string | null;
  everyMs: number | null;
}

/**
 * A fire later than this behind the ledger's now counts as missed rather
 * than late: without a backfill window it is skipped, so a worker back after
 * a long stop does not run a nightly job at noon. Fires less late all run (a
 * slow pass, a short stop).
 */
export const LATE_FIRE_GRACE_MS = 60_000;

/** The most fires one schedule enqueues in one transaction; a longer backfill goes on at the next pass, at once. */
export const MAX_FIRES_PER_PASS = 100;

/** The first fire time strictly after `afterMs` (ms since the epoch). */
export function nextFireAfter(timing: ScheduleTiming, afterMs: number): number {
  if (timing.everyMs !== null) return (Math.floor(afterMs / timing.everyMs) + 1) * timing.everyMs;
  if (timing.pattern === null) throw new Error('a schedule needs a pattern or everyMs');
  const parsed = cron().parse(timing.pattern, { currentDate: new Date(afterMs), tz: timing.tz ?? 'UTC' });
  return parsed.next().toDate().getTime();
}

/** Why a pattern or time zone cannot be used, or undefined when it can. */
export function timingProblem(timing: ScheduleTiming): { field: 'pattern' | 'tz'; message: string } | undefined {
  if (timing.tz !== null) {
    try {
      new Intl.DateTimeFormat('en', { timeZone: timing.tz });
    } catch {
      return { field: 'tz', message: `unknown time zone ${timing.tz}` };
    }
  }
  if (timing.pattern === null) return undefined;
  try {
    cron()
      .parse(timing.pattern, { tz: timing.tz ?? 'UTC' })
      .next();
    return undefined;
  } catch (error) {
    return { field: 'pattern', message: `not a cron pattern: ${(error as Error).message}` };
  }
}

/** What one pass does with a due schedule: the fire times to enqueue now, and the next fire time to store. */
export interface DuePlan {
  fires: number[];
  nextFireAtMs: number;
}

/**
 * The fires of a schedule due at `nowMs` (the ledger's now) whose stored
 * next fire time is `nextFireAtMs` (≤ now): every due fire time at most
 * LATE_FIRE_GRACE_MS late, or within the backfill window if that is longer;
 * older ones were missed and are skipped. At most MAX_FIRES_PER_PASS: then
 * the next fire time stored is the first not enqueued (still due), else the
 * first after now.
 */
export function planDueFires(timing: ScheduleTiming, nextFireAtMs: number, nowMs: number, backfillMs: number): DuePlan {
  const fires: number[] = [];
  const from = nowMs - Math.max(backfillMs, LATE_FIRE_GRACE_MS);
  for (
    let t = from <= nextFireAtMs ? nextFireAtMs : nextFireAfter(timing, from - 1);
    t <= nowMs;
    t = nextFireAfter(timing, t)
  ) {
    if (fires.length === MAX_FIRES_PER_PASS) return { fires, nextFireAtMs: t };
    fires.push(t);
  }
  return { fires, nextFireAtMs: nextFireAfter(timing, nowMs) };
}
