import type { Ledger } from '../ledger/ledger.js';
import type { ClaimedItem } from '../ledger/types.js';
import { sleep } from './notifier.js';

export type LeaseEvent = 'lost' | 'cancel_requested';

/**
 * Renews one item's lease every third of the lease. A failed renewal (the
 * ledger unreachable) is retried while the lease still has time left, minus
 * a safety margin; past that, or when the ledger says the token is stale,
 * the lease is lost and `onEvent('lost')` fires.
 */
export class LeaseKeeper {
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  private stopped = false;
  private leaseUntilMs: number;

  constructor(
    private readonly ledger: Ledger,
    private readonly item: ClaimedItem,
    private readonly leaseMs: number,
    private readonly onEvent: (event: LeaseEvent) => void,
    /** When the lease was taken: an item that waited in the prefetch buffer renews that much sooner. */
    claimedAtMs: number = Date.now(),
  ) {
    this.leaseUntilMs = claimedAtMs + leaseMs;
  }

  start(): void {
    // Whole tenths of a second: Node keeps one timer list per distinct delay, and
    // a delay to the millisecond made a new list (and a heap insert) for most items.
    const delayMs = this.leaseUntilMs - Date.now() - Math.floor((this.leaseMs * 2) / 3);
    this.schedule(Math.max(10, delayMs > 100 ? delayMs - (delayMs % 100) : delayMs));
  }

  /** Renews now; resolves false if the lease is lost. */
  async renewNow(): Promise<boolean> {
    if (this.stopped) return false;
    await this.inFlight;
    const run = this.renew();
    this.inFlight = run.then(() => undefined);
    return run;
  }

  /**
   * Stops renewing. Returns the renewal in flight, if any: wait for it, so it
   * cannot race the finalize (nothing to wait for, the common case, costs no promise).
   */
  stop(): Promise<void> | undefined {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    return this.inFlight;
  }

  private schedule(delayMs = Math.max(10, Math.floor(this.leaseMs / 3))): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.inFlight = this.renew().then(() => this.schedule());
    }, delayMs);
    this.timer.unref();
  }

  private async renew(): Promise<boolean> {
    const margin = Math.min(1000, this.leaseMs / 10);
    for (let attempt = 0; !this.stopped; attempt++) {
      try {
        const startedAt = Date.now();
        const r = await this.ledger.renew(this.item, this.leaseMs);
        if (!r.renewed) {
          this.stopped = true;
          this.onEvent('lost');
          return false;
        }
        this.leaseUntilMs = startedAt + this.leaseMs;
        if (r.cancelRequested) this.onEvent('cancel_requested');
        return true;
      } catch {
        const backoff = Math.min(1000, 50 * 2 ** attempt);
        if (Date.now() + backoff >= this.leaseUntilMs - margin) {
          this.stopped = true;
          this.onEvent('lost');
          return false;
        }
        await sleep(backoff);
      }
    }
    return false;
  }
}
