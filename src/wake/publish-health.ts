import type { Logger } from '../log.js';

/**
 * Whether publishing to Redis works, for the log: one warn line when it
 * starts failing, one when it works again (with the failures in between),
 * never one per failed publish. Wake-ups, control messages and timers fail
 * soft, so a Redis outage would otherwise flood the log.
 */
export class PublishHealth {
  /** Publishes (wake-ups, control, timers) that failed since the channel was made. */
  failures = 0;
  /** `failures` when publishing began failing; undefined while it works. */
  private failuresAtDown: number | undefined;

  constructor(private readonly log: Logger) {}

  failed(error: unknown, what: string): void {
    this.failures++;
    if (this.failuresAtDown !== undefined) return;
    this.failuresAtDown = this.failures - 1;
    this.log.warn(
      { err: error instanceof Error ? error.message : String(error), failed: what },
      'redis publish failing: wake-ups, control messages and timers are not sent (consumers ' +
        'find the work by sweeping the ledger); further failures are counted, not logged',
    );
  }

  worked(): void {
    if (this.failuresAtDown === undefined) return;
    const failedWhileDown = this.failures - this.failuresAtDown;
    this.failuresAtDown = undefined;
    // At warn like the line it closes (the library logs at warn by default), with what failed meanwhile.
    this.log.warn({ failedWhileDown, publishFailures: this.failures }, 'redis publish works again');
  }
}
