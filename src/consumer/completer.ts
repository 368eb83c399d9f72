import type { FinalizeResult, LeaseHandle } from '../ledger/types.js';
import type { Handover } from './handover.js';
import type { CompletionLedger } from './ledger-port.js';

/** Room for a completion batch's lane successors (Handovers.forSuccessors), or undefined when the consumer has none. */
export type SuccessorRoom = (wanted: number) => Handover | undefined;

interface Waiting {
  handle: LeaseHandle;
  result: unknown;
  resolve: (r: FinalizeResult) => void;
  reject: (e: unknown) => void;
}

/** Laneless completions per statement, one statement in flight (measured: docs/BENCHMARKS.md, session 6). */
const LANELESS_BATCH = 500;
/** Laned completions per transaction, two in flight. */
const LANED_BATCH = 128;

/**
 * Collects completions that arrive close together and writes them in
 * batches (a fixed number of statements per batch, each item still a CAS
 * on its own token), on two lines:
 *
 * - laneless items: one UPDATE per batch of up to 500, one batch at a
 *   time. While it is written, the next batch gathers; fewer, larger
 *   statements cost the ledger less per item than two smaller ones in
 *   flight together.
 * - laned items: a transaction per batch of up to 128 (the completion, the
 *   lane advance, and a claim of the lanes' next heads for this consumer,
 *   lane affinity), two at a time: a transaction of several round trips
 *   that holds lane locks is better overlapped than made larger.
 */
export class BatchCompleter {
  private readonly laneless: CompletionLine;
  private readonly laned: CompletionLine;

  constructor(ledger: CompletionLedger, successors?: SuccessorRoom) {
    this.laneless = new CompletionLine(ledger, LANELESS_BATCH, 1);
    this.laned = new CompletionLine(ledger, LANED_BATCH, 2, successors);
  }

  complete(handle: LeaseHandle, result: unknown): Promise<FinalizeResult> {
    // A keyed item's end may admit its key's next: it goes the way of a laned one, claiming what it hands on.
    return (handle.lane === null && handle.concurrencyKey === null ? this.laneless : this.laned).complete(handle, result);
  }
}

/**
 * One line of batches: completions that arrive in the same turn of the
 * event loop go together; while `maxFlushes` batches are being written, the
 * next one gathers; when more wait than one batch takes, another batch is
 * written alongside, up to `maxFlushes`. A batch with laned items asks
 * `successors` for room, and claims its lanes' next heads with the
 * completion.
 */
class CompletionLine {
  private queue: Waiting[] = [];
  private flushes = 0;

  constructor(
    private readonly ledger: CompletionLedger,
    private readonly maxBatch: number,
    private readonly maxFlushes: number,
    private readonly successors?: SuccessorRoom,
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
      const laned = batch.filter((w) => w.handle.lane !== null || w.handle.concurrencyKey !== null).length;
      const room = laned > 0 ? this.successors?.(laned) : undefined;
      try {
        const { results, claimed } = await this.ledger.completeManyClaimingNext(
          batch.map((w) => ({ handle: w.handle, result: w.result })),
          room?.lease,
        );
        room?.accept(claimed);
        batch.forEach((w, i) => w.resolve(results[i] ?? { won: false, state: 'completed' }));
      } catch (error) {
        room?.cancel();
        for (const w of batch) w.reject(error);
      }
    }
    this.flushes--;
  }
}
