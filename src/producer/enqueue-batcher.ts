import type { EnqueueInput } from '../ledger/ledger.js';
import type { EnqueueResult } from '../ledger/types.js';

/** Single enqueues a producer sends at once; more wait and go out together. */
export const ENQUEUES_IN_FLIGHT = 2;
/** The most single enqueues one batch carries. */
export const MAX_ENQUEUE_BATCH = 200;

interface Waiting {
  input: EnqueueInput;
  resolve: (result: EnqueueResult) => void;
  reject: (error: unknown) => void;
}

/**
 * Group commit for single enqueues (`producer.enqueue`), the shape a web
 * process sends: while fewer than ENQUEUES_IN_FLIGHT are in flight, each goes
 * out at once, alone; the ones that arrive meanwhile wait and go out as one
 * batch when one returns. Idle or lightly loaded, nothing waits; when the
 * ledger slows down (a busy TiDB), its work per item falls with the batch,
 * so the producer keeps up instead of queueing transaction after
 * transaction on the pool.
 *
 * Each input is checked on its own before it joins a batch (a bad one fails
 * alone, naming its fields as a single enqueue does); a batch the ledger
 * refuses fails every enqueue in it, each with the same error, and nothing
 * of it was written.
 */
export class EnqueueBatcher {
  private waiting: Waiting[] = [];
  private inFlight = 0;

  constructor(
    private readonly send: (inputs: readonly EnqueueInput[]) => Promise<EnqueueResult[]>,
    private readonly check: (input: EnqueueInput) => void,
  ) {}

  enqueue(input: EnqueueInput): Promise<EnqueueResult> {
    try {
      this.check(input);
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise<EnqueueResult>((resolve, reject) => {
      this.waiting.push({ input, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < ENQUEUES_IN_FLIGHT && this.waiting.length > 0) {
      const batch = this.waiting.splice(0, MAX_ENQUEUE_BATCH);
      this.inFlight++;
      this.send(batch.map((w) => w.input))
        .then(
          (results) =>
            batch.forEach((w, i) => {
              const r = results[i];
              if (r) w.resolve(r);
              else w.reject(new Error('enqueue: no result'));
            }),
          (error: unknown) => batch.forEach((w) => w.reject(error)),
        )
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }
}
