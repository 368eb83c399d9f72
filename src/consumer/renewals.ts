import type { HeldItem, LeaseHandle, RenewOutcome } from '../ledger/types.js';
import type { ConsumerLedger, LeaseLedger, ProgressLedger } from './ledger-port.js';

// The writes a consumer's clock makes for its running items, sent together:
// every write of one kind asked for in one turn of the event loop (the clock
// visits every running item in one pass) goes out as one statement.

type Handle = Pick<LeaseHandle, 'id' | 'leaseToken' | 'group'>;

interface Waiting<In, Out> {
  input: In;
  resolve: (outcome: Out) => void;
  reject: (error: unknown) => void;
}

/** Collects the requests of one turn and sends them through `send` together; each caller learns its own answer. */
class TurnBatch<In, Out> {
  private waiting: Waiting<In, Out>[] = [];

  constructor(
    private readonly send: (inputs: In[]) => Promise<Out[]>,
    private readonly missing: Out,
  ) {}

  add(input: In): Promise<Out> {
    return new Promise<Out>((resolve, reject) => {
      if (this.waiting.length === 0) queueMicrotask(() => this.flush());
      this.waiting.push({ input, resolve, reject });
    });
  }

  private flush(): void {
    const batch = this.waiting;
    this.waiting = [];
    this.send(batch.map((w) => w.input)).then(
      (outcomes) => batch.forEach((w, i) => w.resolve(outcomes[i] ?? this.missing)),
      (error: unknown) => batch.forEach((w) => w.reject(error)),
    );
  }
}

/**
 * A consumer's lease renewals (`Ledger.renewMany`): a consumer with many
 * long handlers renews them with one point write per tick instead of one
 * statement each, and renewals do not queue behind claims and completions on
 * the pool. A failed statement fails each of its renewals, which their lease
 * keepers retry as before.
 */
export class RenewalBatch implements LeaseLedger {
  private readonly byLease = new Map<number, TurnBatch<Handle, RenewOutcome>>();

  constructor(private readonly ledger: Pick<ConsumerLedger, 'renewMany'>) {}

  renew(handle: Handle, leaseMs: number): Promise<RenewOutcome> {
    // A consumer renews with one lease length; a statement per length keeps each renewal exact anyway.
    let batch = this.byLease.get(leaseMs);
    if (batch === undefined) {
      batch = new TurnBatch((handles) => this.ledger.renewMany(handles, leaseMs), {
        renewed: false,
        cancelRequested: false,
      });
      this.byLease.set(leaseMs, batch);
    }
    return batch.add(handle);
  }
}

/** What a progress reporter writes through. */
export interface ProgressWriter {
  save(handle: HeldItem, progress: unknown): Promise<void>;
}

/** A consumer's progress reports of one tick (`Ledger.saveProgress`), as one statement. */
export class ProgressBatch implements ProgressWriter {
  private readonly batch: TurnBatch<{ handle: HeldItem; progress: unknown }, undefined>;

  constructor(ledger: ProgressLedger) {
    this.batch = new TurnBatch(async (reports) => {
      await ledger.saveProgress(reports);
      return [];
    }, undefined);
  }

  save(handle: HeldItem, progress: unknown): Promise<void> {
    return this.batch.add({ handle, progress });
  }
}
