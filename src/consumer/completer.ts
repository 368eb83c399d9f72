import type { FinalizeResult, Ledger } from '../ledger/ledger.js';
import type { SuccessorClaim } from '../ledger/sql/completeBatch.js';
import type { LeaseHandle } from '../ledger/sql/finalize.js';
import type { ClaimedItem } from '../ledger/types.js';

/** Room a consumer grants a completion batch for its lanes' next heads, and where they go. */
export interface SuccessorLease {
  claim: SuccessorClaim;
  /** Called once with what the batch claimed (nothing if it failed): the room is given back. */
  accept(items: readonly ClaimedItem[]): void;
}

interface Waiting {
  handle: LeaseHandle;
  result: unknown;
  resolve: (r: FinalizeResult) => void;
  reject: (e: unknown) => void;
}

/**
 * Collects completions that arrive in the same turn of the event loop and
 * writes them with one `completeMany` (a fixed number of statements per
 * batch, each item still a CAS on its own token). While a batch is being
 * written, the next one gathers; when more wait than one batch takes, a
 * second batch is written alongside. A batch with laned items asks
 * `successors` for room, and claims its lanes' next heads with the
 * completion (lane affinity).
 */
export class BatchCompleter {
  private queue: Waiting[] = [];
  private flushes = 0;

  constructor(
    private readonly ledger: Ledger,
    private readonly maxBatch = 128,
    /** Batches written at once: a laned batch is a transaction of several round trips, so a second one overlaps it. */
    private readonly maxFlushes = 2,
    private readonly successors?: (wanted: number) => SuccessorLease | undefined,
  ) {}

  complete(handle: LeaseHandle, result: unknown): Promise<FinalizeResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ handle, result, resolve, reject });
      if (this.flushes === 0) {
        this.flushes++;
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      // More waiting than this batch takes: let another flush write it meanwhile.
      if (this.queue.length > 0 && this.flushes < this.maxFlushes) {
        this.flushes++;
        void this.flush();
      }
      const laned = batch.filter((w) => w.handle.lane !== null).length;
      const lease = laned > 0 ? this.successors?.(laned) : undefined;
      try {
        const { results, claimed } = await this.ledger.completeManyClaimingNext(
          batch.map((w) => ({ handle: w.handle, result: w.result })),
          lease?.claim,
        );
        lease?.accept(claimed);
        batch.forEach((w, i) => w.resolve(results[i] ?? { won: false, state: 'completed' }));
      } catch (error) {
        lease?.accept([]);
        for (const w of batch) w.reject(error);
      }
    }
    this.flushes--;
  }
}
