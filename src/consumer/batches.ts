import type { Transaction } from 'kysely';
import { z } from 'zod';
import { LeaseLostError, OwnershipLostError, ValidationError } from '../errors.js';
import type { BatchLedger } from './ledger-port.js';
import { DeferError, JobAbortedError, PermanentError, SkipError } from './errors.js';
import type {
  BatchContext,
  BatchHandler,
  BatchItemOutcome,
  BatchOptions,
  BatchOutcomes,
  Job,
  JobContext,
  RegisteredHandler,
} from './types.js';
import { heldItemOf, markCompletedElsewhere } from './job-run.js';

export interface BatchHandlerDefinition<P = unknown, DB = Record<string, never>> {
  batch: BatchOptions;
  handle: BatchHandler<P, DB>;
  /** Payloads failing it end dead, class `invalid_payload`, before their batch gathers. */
  schema?: z.ZodType<P>;
  /** Per-type deadline (ms) of each item; 0 = none. */
  deadlineMs?: number;
}

const batchOptions = z
  .object({ max: z.number().int().min(1).max(1000), maxWaitMs: z.number().int().min(0).max(60_000) })
  .strict();

/** A batch handler, registered by type like any handler; the consumer gathers its items into calls. */
export function defineBatchHandler<P, DB = Record<string, never>>(
  def: BatchHandlerDefinition<P, DB>,
): RegisteredHandler<DB> {
  const parsed = batchOptions.safeParse(def.batch);
  if (!parsed.success) throw ValidationError.fromZod(parsed.error, 'defineBatchHandler', 'batch');
  const batchHandle = def.handle as unknown as BatchHandler<unknown, DB>;
  return {
    handle: () => Promise.reject(new Error('a batch handler runs through its consumer, which gathers its items')),
    batch: { options: parsed.data, handle: batchHandle },
    ...(def.schema !== undefined ? { schema: def.schema } : {}),
    ...(def.deadlineMs !== undefined ? { deadlineMs: def.deadlineMs } : {}),
  };
}

/** What a member's run hands the collector: its job, its context and how to end it. */
interface Member<DB> {
  job: Job;
  ctx: JobContext<DB>;
  settle: (outcome: BatchItemOutcome | { thrown: unknown }) => void;
}

/**
 * One type's batches in one consumer (docs/design/batches-and-steps.md, Batch handlers).
 * Each item still has a run of its own (lease, deadline, cancel, outcome
 * written by its own CAS); its handler is this gatherer's `handleOne`,
 * which waits for the batch to run and then ends the item as the batch's
 * answer says. A batch runs once `max` items wait, or `maxWaitMs` after
 * its first. A waiting item whose signal aborts leaves the batch at once.
 */
export class BatchGatherer<DB> {
  private waiting: Member<DB>[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly type: string,
    private readonly options: BatchOptions,
    private readonly handle: BatchHandler<unknown, DB>,
    /** Where the batch's outcomes are written, in one transaction. */
    private readonly ledger: BatchLedger,
  ) {}

  /** The handler each item of the type runs: it joins the next batch and ends as the batch's answer says. */
  readonly handleOne = (job: Job, ctx: JobContext<DB>): Promise<unknown> =>
    new Promise<BatchItemOutcome | { thrown: unknown }>((settle) => {
      if (ctx.signal.aborted) return settle({ thrown: ctx.signal.reason });
      const member: Member<DB> = { job, ctx, settle };
      ctx.signal.addEventListener('abort', () => this.leave(member), { once: true });
      this.waiting.push(member);
      if (this.waiting.length >= this.options.max) this.dispatch();
      else this.timer ??= setTimeout(() => this.dispatch(), this.options.maxWaitMs);
    }).then(endAs);

  private leave(member: Member<DB>): void {
    const at = this.waiting.indexOf(member);
    if (at < 0) return;
    this.waiting.splice(at, 1);
    member.settle({ thrown: member.ctx.signal.reason });
    if (this.waiting.length === 0) this.clearTimer();
  }

  private clearTimer(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private dispatch(): void {
    this.clearTimer();
    const batch = this.waiting.splice(0, this.options.max);
    if (this.waiting.length > 0) this.timer = setTimeout(() => this.dispatch(), this.options.maxWaitMs);
    if (batch.length > 0) void this.run(batch);
  }

  private async run(batch: Member<DB>[]): Promise<void> {
    const controller = new AbortController();
    for (const m of batch) {
      const onAbort = (): void => {
        const reason = m.ctx.signal.reason as unknown;
        // One item's lost lease or cancel is its own; a shutdown or deadline is the batch's.
        if (reason instanceof JobAbortedError && (reason.reason === 'shutdown' || reason.reason === 'deadline'))
          controller.abort(reason);
      };
      if (m.ctx.signal.aborted) onAbort();
      else m.ctx.signal.addEventListener('abort', onAbort, { once: true });
    }
    const byId = new Map(batch.map((m) => [m.job.id, m]));
    let committedInTx = false;
    const ctx: BatchContext<DB> = {
      signal: controller.signal,
      transaction: async (fn) => {
        if (committedInTx) throw new Error('ctx.transaction already completed this batch');
        const { value, completed } = await this.ledger.completeManyWithin(
          batch.map((m) => heldItemOf(m.ctx)),
          async (trx) => checkOutcomes(await fn(trx as unknown as Transaction<DB>)),
          (answer) =>
            Object.entries(answer).flatMap(([id, o]) => (o.outcome === 'complete' ? [{ id, result: o.result }] : [])),
        );
        committedInTx = true;
        for (const [id, laneAdvanced] of completed) {
          const m = byId.get(id);
          if (m) markCompletedElsewhere(m.ctx, laneAdvanced);
        }
        return value;
      },
    };
    let answer: BatchOutcomes;
    try {
      answer = checkOutcomes(
        await this.handle(
          batch.map((m) => m.job),
          ctx,
        ),
      );
    } catch (error) {
      // A throw retries the whole batch (its items' runs write each retry). A batch transaction that
      // rolled back for one lost lease is a failure of the batch for the others, which still hold theirs:
      // their runs must write the retry, not take it for a loss of their own lease.
      // An ownership epoch that moved on is every item's loss: their runs give them back.
      const thrown =
        error instanceof LeaseLostError && !(error instanceof OwnershipLostError)
          ? new Error(`the batch's transaction rolled back: ${error.message}`)
          : error;
      for (const m of batch) m.settle({ thrown });
      return;
    }
    for (const m of batch) {
      const o = answer[m.job.id];
      m.settle(o ?? { thrown: new Error(`batch ${this.type}: no outcome for item ${m.job.id}; retried`) });
    }
  }
}

const outcomeSchema = z.union([
  z.object({ outcome: z.literal('complete'), result: z.unknown().optional() }).strict(),
  z.object({ outcome: z.literal('retry'), error: z.unknown() }).strict(),
  z.object({ outcome: z.literal('dead'), error: z.unknown(), failureClass: z.string().optional() }).strict(),
  z
    .object({
      outcome: z.literal('release'),
      delayMs: z.number().int().min(0).optional(),
      reason: z.string().optional(),
    })
    .strict(),
  z.object({ outcome: z.literal('skip'), reason: z.string().optional() }).strict(),
]);
const outcomesSchema = z.record(z.string(), outcomeSchema);

/** The handler's answer, checked: a malformed one is a ValidationError naming the entry, and the batch is retried. */
function checkOutcomes(answer: unknown): BatchOutcomes {
  const parsed = outcomesSchema.safeParse(answer);
  if (!parsed.success) throw ValidationError.fromZod(parsed.error, 'batch handler answer', 'outcomes');
  return parsed.data as BatchOutcomes;
}

/** An item's run ends as its batch said: the value its handler returns, or what it throws. */
function endAs(o: BatchItemOutcome | { thrown: unknown }): unknown {
  if ('thrown' in o) throw o.thrown;
  switch (o.outcome) {
    case 'complete':
      return o.result;
    case 'retry':
      throw o.error;
    case 'dead':
      throw new PermanentError(o.error instanceof Error ? o.error.message : String(o.error), o.failureClass);
    case 'release':
      throw new DeferError(new Date(Date.now() + (o.delayMs ?? 0)), o.reason ?? 'released by its batch');
    case 'skip':
      throw new SkipError(o.reason);
  }
}
