import type { EnqueueInput } from '../ledger/ledger.js';
import type { EnqueueResult } from '../ledger/types.js';
import { IdempotencyConflictError, ValidationError } from '../errors.js';

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
 * alone, naming its fields as a single enqueue does). What only the ledger
 * can check (a key too long for its type's own limit; an idempotency key
 * that names a different request, IdempotencyConflictError) refuses the
 * whole batch, writing nothing: each of its enqueues then goes again alone,
 * so only the bad one fails, as a single enqueue would. A
 * batch refused otherwise fails every enqueue in it, each with the same
 * error, and nothing of it was written.
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
      this.sendBatch(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async sendBatch(batch: readonly Waiting[]): Promise<void> {
    try {
      settle(batch, await this.send(batch.map((w) => w.input)));
      return;
    } catch (error) {
      if (batch.length === 1) return batch[0]!.reject(asSingle(error));
      if (!(error instanceof ValidationError || error instanceof IdempotencyConflictError))
        return batch.forEach((w) => w.reject(error));
    }
    // Refused for what only the ledger checks, nothing written: each again alone, in order (a lane
    // keeps its callers' order).
    for (const w of batch) {
      try {
        settle([w], await this.send([w.input]));
      } catch (error) {
        w.reject(asSingle(error));
      }
    }
  }
}

function settle(batch: readonly Waiting[], results: readonly EnqueueResult[]): void {
  batch.forEach((w, i) => {
    const r = results[i];
    if (r) w.resolve(r);
    else w.reject(new Error('enqueue: no result'));
  });
}

/** A one-item batch's refusal as a single enqueue's: its fields named without the batch's `items[0]`. */
function asSingle(error: unknown): unknown {
  if (error instanceof IdempotencyConflictError) return error.asSingle();
  if (!(error instanceof ValidationError)) return error;
  const field = (f: string): string => (f === 'items[0]' ? '(input)' : f.replace(/^items\[0\]\./, ''));
  return new ValidationError(
    error.issues.map((i) => ({ ...i, field: field(i.field) })),
    'enqueue',
  );
}
