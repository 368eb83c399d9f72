import { isConnectionError } from '../ledger/retry.js';
import type { ClaimedItem } from '../ledger/types.js';
import { sleep } from '../sleep.js';
import type { LeaseLedger } from './ledger-port.js';

export type LeaseEvent = 'lost' | 'cancel_requested';

/**
 * The consumer's clock ticks this many times per lease (at most once a
 * second): a renewal starts between a third of the lease and a third plus
 * a tick, leaving well over half of it for retries.
 */
export const LEASE_TICKS_PER_LEASE = 12;

export function leaseTickMs(leaseMs: number): number {
  return Math.max(10, Math.min(1000, Math.floor(leaseMs / LEASE_TICKS_PER_LEASE)));
}

/** What the consumer's clock drives: each running item's lease and long deadline. */
export interface ClockedRun {
  tick(nowMs: number): boolean;
  joinRenewals(nowMs: number): void;
}

/**
 * One clock for every running item of a consumer: each tick renews the leases
 * that are due (and enforces long deadlines); when any renews, the leases
 * nearly due join it, so a tick's renewals go out as one statement (RenewalBatch).
 */
export function startLeaseClock(running: () => Iterable<ClockedRun>, leaseMs: number): NodeJS.Timeout {
  const clock = setInterval(() => {
    const now = Date.now();
    let renewing = false;
    for (const run of running()) renewing = run.tick(now) || renewing;
    if (renewing) for (const run of running()) run.joinRenewals(now);
  }, leaseTickMs(leaseMs));
  clock.unref();
  return clock;
}

/**
 * How long after a lease was taken its renewal falls due: a third of the
 * lease, or a sixth when it joins another renewal going out in the same tick.
 */
export function renewalPointMs(leaseMs: number, joining: boolean): number {
  return joining ? Math.floor(leaseMs / 6) : leaseMs - Math.floor((leaseMs * 2) / 3);
}

/**
 * The pause before try `attempt + 1` of a failed write under a lease (a renewal, a finish): doubling from 50 ms,
 * capped at a second.
 */
export function leaseWriteRetryMs(attempt: number): number {
  return Math.min(1000, 50 * 2 ** attempt);
}

/**
 * Renews one item's lease every third of the lease. A failed renewal (the
 * ledger unreachable) is retried while the lease still has time left, minus
 * a safety margin; past that, or when the ledger says the token is stale,
 * the lease is lost and `onEvent('lost')` fires.
 *
 * It has no timer of its own: the consumer's clock calls `tick()` for every
 * running item (see LEASE_TICKS_PER_LEASE), so an item that finishes before
 * its first renewal, nearly all of them, costs no timer at all.
 */
export class LeaseKeeper {
  private inFlight: Promise<void> | undefined;
  private stopped = false;
  private leaseUntilMs: number;

  constructor(
    private readonly ledger: LeaseLedger,
    private readonly item: ClaimedItem,
    private readonly leaseMs: number,
    private readonly onEvent: (event: LeaseEvent) => void,
    /** When the lease was taken: an item that waited in the prefetch buffer renews that much sooner. */
    claimedAtMs: number = Date.now(),
  ) {
    this.leaseUntilMs = claimedAtMs + leaseMs;
  }

  /**
   * Renews if a third of the lease has passed since it was last taken and no
   * renewal is running; returns whether it started one. `joining`: another
   * lease of this consumer renews in this tick, so this one goes along once a
   * sixth has passed. Leases taken at different moments (a claim round, an
   * offer, a lane's successor) so fall into step after one renewal and share
   * its statement from then on, rather than each costing one of its own.
   */
  tick(nowMs: number, joining = false): boolean {
    if (this.stopped || this.inFlight !== undefined) return false;
    if (nowMs < this.leaseUntilMs - this.leaseMs + renewalPointMs(this.leaseMs, joining)) return false;
    this.track(this.renew());
    return true;
  }

  /** Renews now; resolves false if the lease is lost. */
  async renewNow(): Promise<boolean> {
    if (this.stopped) return false;
    await this.inFlight;
    const run = this.renew();
    this.track(run);
    return run;
  }

  /**
   * Stops renewing. Returns the renewal in flight, if any: wait for it, so it
   * cannot race the finish (nothing to wait for, the common case, costs no promise).
   */
  stop(): Promise<void> | undefined {
    this.stopped = true;
    return this.inFlight;
  }

  private track(run: Promise<boolean>): void {
    const settled: Promise<void> = run.then(() => {
      if (this.inFlight === settled) this.inFlight = undefined;
    });
    this.inFlight = settled;
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
      } catch (error) {
        // A dead connection (killed, reset) is dropped by the pool: the next
        // renewal gets a fresh one, so try it at once, once, before backing off.
        // A renewal is safe to repeat: it only sets the lease's end again.
        if (attempt === 0 && isConnectionError(error)) continue;
        const backoff = leaseWriteRetryMs(attempt);
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
