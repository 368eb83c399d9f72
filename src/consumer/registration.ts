import type { ConsumerRow } from '../ledger/sql/consumers.js';
import type { Logger } from '../log.js';
import type { ConsumerLedger } from './ledger-port.js';

/** How often a consumer writes its heartbeat row; it counts as live for three beats (sql/consumers.ts). */
export const HEARTBEAT_MS = 5_000;

/**
 * Keeps a consumer's row in the ledger's registry of live consumers
 * (docs/design.md §6, "Live consumers"): written at start and every
 * HEARTBEAT_MS, removed at stop. What the fleet serves is read from it by
 * explain and stats; nothing claims by it, so a failed beat is only logged
 * and the next one tries again.
 */
export class ConsumerRegistration {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;

  constructor(
    private readonly ledger: Pick<ConsumerLedger, 'consumerBeat' | 'consumerGone'>,
    private readonly row: ConsumerRow,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    await this.beat(true);
    this.timer = setInterval(() => void this.beat(false), HEARTBEAT_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.beating;
    await this.ledger.consumerGone(this.row.name).catch((error: unknown) => this.log.debug({ err: error }, 'consumer registry: removing the row failed; it ages out'));
  }

  private beat(first: boolean): Promise<void> {
    // One at a time: a beat that outlasts the interval is not joined by the next.
    this.beating ??= this.ledger
      .consumerBeat(this.row, first)
      .catch((error: unknown) => this.log.warn({ err: error }, 'consumer registry: heartbeat failed'))
      .finally(() => (this.beating = undefined));
    return this.beating;
  }
}
