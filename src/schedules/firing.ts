import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import { ScheduleFirer } from './firer.js';

interface Held {
  firer: ScheduleFirer;
  holders: number;
}

/** One firer per ledger in a process, however many consumers (and the supervisor) share that ledger. */
const firing = new WeakMap<Ledger, Held>();

/**
 * Fires the ledger's schedules from this process while held (src/schedules/firer.ts):
 * the first holder of a ledger starts its firer, with its options; the last
 * release stops it. The supervisor holds it for `lanewake worker`, and each
 * Consumer while it runs, so a program running consumers fires schedules as
 * the worker does. Returns the release.
 */
export function holdScheduleFiring(options: {
  ledger: Ledger;
  wake?: WakeChannel | undefined;
  log: Logger;
  checkIntervalMs?: number;
}): () => Promise<void> {
  let held = firing.get(options.ledger);
  if (!held) {
    held = { firer: new ScheduleFirer(options), holders: 0 };
    firing.set(options.ledger, held);
    held.firer.start();
  }
  held.holders++;
  const mine = held;
  let released = false;
  return async () => {
    if (released) return;
    released = true;
    if (--mine.holders > 0) return;
    if (firing.get(options.ledger) === mine) firing.delete(options.ledger);
    await mine.firer.stop();
  };
}

/** The firer running for this ledger in this process, if any (tests, metrics). */
export function scheduleFirerOf(ledger: Ledger): ScheduleFirer | undefined {
  return firing.get(ledger)?.firer;
}
