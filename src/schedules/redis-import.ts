import { ValidationError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log.js';
import type { WakeChannel } from '../wake/wake-channel.js';

/**
 * The upgrade of schedules kept in Redis (docs/design/wake.md, "Recurring
 * schedules"): lanewake before schema 12 kept each recurring schedule only
 * as a BullMQ job scheduler. Each one found is made in the ledger (unless
 * the ledger already holds a schedule of its name, which then stands) and
 * removed from BullMQ, so it fires from the ledger from now on, and never
 * twice. True once Redis answered and every one found was moved; false
 * (try again later) while Redis is away.
 */
export async function importRedisSchedules(ledger: Ledger, wake: WakeChannel, log: Logger): Promise<boolean> {
  if (!(await wake.usable())) return false;
  let found;
  try {
    found = await wake.timers.legacySchedules();
  } catch {
    return false;
  }
  for (const schedule of found) {
    try {
      const made = await ledger.schedules.insertIfAbsent(schedule);
      log.info(
        { schedule: schedule.name, made },
        made
          ? 'schedule imported from Redis into the ledger'
          : 'schedule in Redis already held by the ledger: Redis copy removed',
      );
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      // Left in Redis, where it no longer fires: an operator recreates it with producer.schedule.
      log.warn(
        { schedule: schedule.name, err: error.message },
        'a schedule kept in Redis cannot be imported into the ledger; recreate it',
      );
      continue;
    }
    await wake.timers.removeLegacySchedule(schedule.name);
  }
  return true;
}
