import type { Ledger } from '../ledger/ledger.js';
import { isConnectionError } from '../ledger/retry.js';
import type { Logger } from '../log.js';
import { sleep } from '../sleep.js';

/** Restart backoff of a crashed consumer loop: 1 s doubling to 30 s, reset after a healthy run. */
export class RestartBackoff {
  private next: number;

  constructor(
    private readonly initialMs = 1_000,
    private readonly maxMs = 30_000,
    private readonly healthyAfterMs = 60_000,
  ) {
    this.next = initialMs;
  }

  /** The delay before the next restart, given how long the run that just ended lasted. */
  delayAfter(runMs: number): number {
    if (runMs >= this.healthyAfterMs) this.next = this.initialMs;
    const delay = this.next;
    this.next = Math.min(this.maxMs, this.next * 2);
    return delay;
  }
}

/** How long a starting worker waits out an unreachable ledger before it fails its start. */
const STARTUP_LEDGER_WAIT_MS = 60_000;

/**
 * The ledger's schema is current. A connection lost or refused meanwhile (the server restarting, a reset) is waited
 * out, 0.5 s doubling to 8 s, for up to STARTUP_LEDGER_WAIT_MS: a worker started beside a ledger that is briefly
 * unreachable starts once it answers, instead of exiting. A schema behind, or any other error, fails at once.
 */
export async function schemaCurrentOnceReachable(
  ledger: Pick<Ledger, 'assertSchemaCurrent'>,
  log: Logger,
  stopping: () => boolean,
): Promise<void> {
  const until = Date.now() + STARTUP_LEDGER_WAIT_MS;
  for (let delay = 500; ; delay = Math.min(delay * 2, 8_000)) {
    try {
      return await ledger.assertSchemaCurrent();
    } catch (error) {
      if (!isConnectionError(error) || Date.now() + delay > until || stopping()) throw error;
      log.warn({ err: error, retryInMs: delay }, 'ledger unreachable at start; trying again');
      await sleep(delay);
    }
  }
}
