import { CronExpressionParser } from 'cron-parser';

/** The timing half of a schedule: a cron pattern in a time zone, or an interval. */
export interface ScheduleTiming {
  pattern: string | null;
  tz: string | null;
  everyMs: number | null;
}

/**
 * A fire later than this behind the ledger's now counts as missed rather
 * than late: without a backfill window it is skipped, so a worker back after
 * a long stop does not run a nightly job at noon.
 */
export const LATE_FIRE_GRACE_MS = 60_000;

/** The most fires one schedule enqueues in one transaction; a longer backfill goes on at the next pass, at once. */
export const MAX_FIRES_PER_PASS = 100;

/** The first fire time strictly after `afterMs` (ms since the epoch). */
export function nextFireAfter(timing: ScheduleTiming, afterMs: number): number {
  if (timing.everyMs !== null) return (Math.floor(afterMs / timing.everyMs) + 1) * timing.everyMs;
  if (timing.pattern === null) throw new Error('a schedule needs a pattern or everyMs');
  const cron = CronExpressionParser.parse(timing.pattern, { currentDate: new Date(afterMs), tz: timing.tz ?? 'UTC' });
  return cron.next().toDate().getTime();
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
    CronExpressionParser.parse(timing.pattern, { tz: timing.tz ?? 'UTC' }).next();
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
 * next fire time is `nextFireAtMs` (≤ now): every fire time of the backfill
 * window, and the latest due one if it is within LATE_FIRE_GRACE_MS; the
 * others are missed and skipped. At most MAX_FIRES_PER_PASS: then the next
 * fire time stored is the first not enqueued (still due), else the first
 * after now.
 */
export function planDueFires(timing: ScheduleTiming, nextFireAtMs: number, nowMs: number, backfillMs: number): DuePlan {
  const fires: number[] = [];
  if (backfillMs > 0) {
    for (let t = firstFireFrom(timing, nextFireAtMs, nowMs - backfillMs); t <= nowMs; t = nextFireAfter(timing, t)) {
      if (fires.length === MAX_FIRES_PER_PASS) return { fires, nextFireAtMs: t };
      fires.push(t);
    }
  }
  const latest = latestFire(timing, nextFireAtMs, nowMs);
  if (latest !== undefined && latest >= nowMs - LATE_FIRE_GRACE_MS && fires[fires.length - 1] !== latest) fires.push(latest);
  return { fires, nextFireAtMs: nextFireAfter(timing, nowMs) };
}

/** The first fire time at or after both `nextFireAtMs` (itself a fire time) and `fromMs`. */
function firstFireFrom(timing: ScheduleTiming, nextFireAtMs: number, fromMs: number): number {
  return fromMs <= nextFireAtMs ? nextFireAtMs : nextFireAfter(timing, fromMs - 1);
}

/** The latest fire time from `nextFireAtMs` to `nowMs`, looked for within the grace only. */
function latestFire(timing: ScheduleTiming, nextFireAtMs: number, nowMs: number): number | undefined {
  if (timing.everyMs !== null) {
    const t = Math.floor(nowMs / timing.everyMs) * timing.everyMs;
    return t >= nextFireAtMs ? t : undefined;
  }
  let latest: number | undefined;
  for (let t = firstFireFrom(timing, nextFireAtMs, nowMs - LATE_FIRE_GRACE_MS); t <= nowMs; t = nextFireAfter(timing, t)) latest = t;
  return latest;
}
