import type { LeaseHandle, RenewOutcome } from '../ledger/types.js';
import type { ConsumerLedger, LeaseLedger } from './ledger-port.js';

type Handle = Pick<LeaseHandle, 'id' | 'leaseToken'>;

interface Waiting {
  handle: Handle;
  leaseMs: number;
  resolve: (outcome: RenewOutcome) => void;
  reject: (error: unknown) => void;
}

/**
 * A consumer's lease renewals, sent together: every renewal asked for in one
 * turn of the event loop (the consumer's clock visits every running item in
 * one pass) goes out as one statement (`Ledger.renewMany`), so a consumer
 * with many long handlers renews them with one point write per tick instead
 * of one statement each, and renewals do not queue behind claims and
 * completions on the pool. Each caller still learns its own lease's fate,
 * and a failed statement fails each of its renewals, which their lease
 * keepers retry as before.
 */
export class RenewalBatch implements LeaseLedger {
  private waiting: Waiting[] = [];

  constructor(private readonly ledger: Pick<ConsumerLedger, 'renewMany'>) {}

  renew(handle: Handle, leaseMs: number): Promise<RenewOutcome> {
    return new Promise<RenewOutcome>((resolve, reject) => {
      if (this.waiting.length === 0) queueMicrotask(() => this.flush());
      this.waiting.push({ handle, leaseMs, resolve, reject });
    });
  }

  private flush(): void {
    const batch = this.waiting;
    this.waiting = [];
    // A consumer renews with one lease length; a statement per length keeps each renewal exact anyway.
    const byLease = new Map<number, Waiting[]>();
    for (const w of batch) byLease.set(w.leaseMs, [...(byLease.get(w.leaseMs) ?? []), w]);
    for (const [leaseMs, group] of byLease) {
      this.ledger.renewMany(group.map((w) => w.handle), leaseMs).then(
        (outcomes) => group.forEach((w, i) => w.resolve(outcomes[i] ?? { renewed: false, cancelRequested: false })),
        (error: unknown) => group.forEach((w) => w.reject(error)),
      );
    }
  }
}
