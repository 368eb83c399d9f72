import { randomUUID } from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import { ValidationError, fieldPath } from '../errors.js';
import { encodeProgress } from '../ledger/outcomes.js';
import {
  BlockOnError,
  DeferError,
  JobAbortedError,
  PermanentError,
  SkipError,
  type AbortReason,
} from '../consumer/errors.js';
import {
  normalizeHandler,
  type HandlerEntry,
  type Job,
  type JobContext,
  type RegisteredHandler,
} from '../consumer/types.js';
import { DEFAULT_MAX_ATTEMPTS, type EnqueueInput } from '../ledger/inputs.js';
import { stageName, validate } from '../ledger/validation.js';
import { checkSchema } from '../jobs/standard-schema.js';

/**
 * The job a test hands `run()`: a payload, and whatever else the handler looks at (defaults: a
 * fresh id, attempt 1 of 25).
 */
export interface TestJob<P = unknown> {
  payload: P;
  id?: string;
  queue?: string;
  type?: string;
  lane?: string | null;
  laneSeq?: number | null;
  attempt?: number;
  maxAttempts?: number;
  checkpoint?: unknown;
  enqueuedAt?: Date;
}

export interface RunOptions<DB> {
  /**
   * What `ctx.transaction` and `ctx.step(…, { transaction: true })` run on:
   * your Kysely transaction (the handler's writes join it, and your test
   * commits or rolls it back), or a Kysely instance (each call runs in a
   * transaction of its own there). Without it, they throw.
   */
  db?: Kysely<DB> | Transaction<DB>;
  /** Abort it to see how the handler stops (ctx.signal aborts with a JobAbortedError of `abortReason`). */
  signal?: AbortSignal;
  /** Why ctx.signal aborts when `signal` does; default `cancelled`. */
  abortReason?: AbortReason;
  /** Steps an earlier attempt recorded, by name: ctx.step returns these without running its fn, as the engine would. */
  steps?: Readonly<Record<string, unknown>>;
}

/** How the engine would end the item after this run. */
export type RunOutcome =
  /** Returned, or committed ctx.transaction: `result` is what the item would store. */
  | { outcome: 'completed'; result: unknown }
  /** Threw; the item would be retried after the backoff (attempts remain). */
  | { outcome: 'retry'; error: unknown }
  /**
   * The item would end dead: a PermanentError (its class), the attempt budget spent (`error`), a payload the schema
   * refuses (`invalid_payload`).
   */
  | { outcome: 'failed'; error: unknown; failureClass: string }
  /** Threw Defer / RateLimitedError: released until `runAt` (undefined: after the type's backoff), no attempt spent. */
  | { outcome: 'released'; error: DeferError; runAt: Date | undefined }
  /** Threw SkipError (or called ctx.skip): the item would end skipped with `reason`. */
  | { outcome: 'skipped'; error: SkipError; reason: string }
  /** Threw BlockOn: blocked until `dependencyKey` is woken. */
  | { outcome: 'blocked'; error: BlockOnError; dependencyKey: string }
  /** Settled after its signal aborted: the item ends by `reason` (cancelled; released at a deadline or shutdown). */
  | { outcome: 'aborted'; reason: AbortReason; error: unknown };

/** `run()`'s answer: the outcome, and what the run left in memory. */
export type RunResult = RunOutcome & {
  /** The job the handler saw (its payload parsed by the schema, when there is one). */
  job: Job;
  /** Every ctx.progress report, in order. */
  progress: unknown[];
  /** The last ctx.checkpoint value (what the next attempt would see), or the job's own. */
  checkpoint: unknown;
  /** The steps recorded by this run and before it, by name. */
  steps: Record<string, unknown>;
  /** What ctx.enqueue put in the run's committed ctx.transaction, in order (nothing is enqueued anywhere). */
  enqueued: EnqueueInput[];
  /** Every ctx.stage this run timed, in the order they ended. */
  stages: { name: string; ms: number }[];
};

/**
 * A handler that says its payload types (jobs.handlers' results do): run() then takes the schema's
 * input as the test's payload.
 */
export type TypedEntry<In, DB> = RegisteredHandler<DB> & { readonly '~payload'?: { input: In; output: unknown } };

/**
 * Runs one handler inline against `job`, with a ctx that keeps everything in
 * memory except `ctx.transaction` (your database), and answers how the
 * engine would end the item. Nothing touches the ledger.
 */
export async function runInline<DB>(
  entry: HandlerEntry<DB>,
  input: TestJob,
  options: RunOptions<DB> = {},
): Promise<RunResult> {
  const def = normalizeHandler(entry);
  if (def.batch !== undefined) throw new Error('run() takes one item at a time: drain a queue to run a batch handler');
  const attempt = input.attempt ?? 1;
  const job: Job = {
    id: input.id ?? randomUUID(),
    queue: input.queue ?? 'test',
    type: input.type ?? 'test',
    lane: input.lane ?? null,
    laneSeq: input.laneSeq ?? null,
    payload: input.payload,
    attempt,
    maxAttempts: input.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    checkpoint: input.checkpoint ?? null,
    fence: { token: randomUUID(), epoch: null, attempt },
    enqueuedAt: input.enqueuedAt ?? new Date(),
  };
  const state = {
    progress: [] as unknown[],
    checkpoint: job.checkpoint,
    steps: { ...options.steps } as Record<string, unknown>,
    enqueued: [] as EnqueueInput[],
    stages: [] as { name: string; ms: number }[],
  };
  const answer = (outcome: RunOutcome): RunResult => ({ ...outcome, job, ...state });

  if (def.schema !== undefined) {
    const check = await checkSchema(def.schema, input.payload);
    if (!check.ok) {
      const error = new ValidationError(
        check.issues.map((i) => ({ field: fieldPath('payload', i.path), message: i.message })),
        "payload does not match the handler's schema",
      );
      return answer({ outcome: 'failed', error, failureClass: 'invalid_payload' });
    }
    job.payload = check.value;
  }
  // A coalescing type's run always sees its group; run() runs one item, a group of one.
  if (def.coalesce !== undefined)
    job.coalesced =
      def.coalesce === 'latest' ? { ids: [job.id], count: 1 } : { ids: [job.id], count: 1, payloads: [job.payload] };

  const controller = new AbortController();
  const abortReason = options.abortReason ?? 'cancelled';
  const onAbort = (): void => controller.abort(new JobAbortedError(abortReason));
  if (options.signal?.aborted) onAbort();
  else options.signal?.addEventListener('abort', onAbort, { once: true });

  let committed: { value: unknown } | undefined;
  /** ctx.enqueue's items of the ctx.transaction running now; kept only once it committed. */
  let outbox: EnqueueInput[] | undefined;
  const inTransaction = async <T>(fn: (trx: Transaction<DB>) => Promise<T>): Promise<T> => {
    const db = options.db;
    if (db === undefined) throw new Error('ctx.transaction needs a database: run(handler, job, { db: trx })');
    return db.isTransaction ? fn(db as Transaction<DB>) : db.transaction().execute(fn);
  };
  const ctx: JobContext<DB> = {
    signal: controller.signal,
    transaction: async (fn) => {
      if (committed !== undefined) throw new Error('ctx.transaction already completed this item');
      const value = await inTransaction(async (trx) => {
        outbox = [];
        try {
          return await fn(trx);
        } finally {
          state.enqueued = outbox;
          outbox = undefined;
        }
      }).catch((error: unknown) => {
        state.enqueued = [];
        throw error;
      });
      committed = { value };
      return value;
    },
    enqueue: async (input) => {
      const [result] = await ctx.enqueueMany([input]);
      return result!;
    },
    enqueueMany: async (inputs) => {
      if (outbox === undefined)
        throw new Error(
          'ctx.enqueue runs only inside ctx.transaction: follow-up items ' +
            'commit with the completion (docs/design.md §4, the outbox)',
        );
      const taken = outbox;
      return inputs.map((input) => {
        taken.push(input);
        return { id: randomUUID(), duplicate: false, laneSeq: null };
      });
    },
    // Workflows need a ledger: the inline run has none (docs/design/workflows.md; test them on a consumer).
    workflow: async () => {
      throw new Error('ctx.workflow is not available in an inline run: test workflows with a consumer');
    },
    dependencies: async () => ({ dependencies: [], next: null }),
    checkpoint: async (value) => {
      state.checkpoint = value;
      return true;
    },
    heartbeat: async () => true,
    progress: (value) => {
      encodeProgress(value);
      state.progress.push(value);
    },
    step: (async <T>(
      name: string,
      fn: ((trx: Transaction<DB>) => Promise<T>) | (() => Promise<T>),
      stepOptions?: { transaction: true },
    ): Promise<T> => {
      if (Object.hasOwn(state.steps, name)) return state.steps[name] as T;
      const value = stepOptions?.transaction
        ? await inTransaction(fn as (trx: Transaction<DB>) => Promise<T>)
        : await (fn as () => Promise<T>)();
      // What a later attempt gets back is the recorded JSON, not the object fn returned.
      state.steps[name] = value === undefined ? null : JSON.parse(JSON.stringify(value));
      return value;
    }) as JobContext<DB>['step'],
    skip: (reason) => {
      throw new SkipError(reason);
    },
    stage: async (name, fn) => {
      validate(stageName, name, 'ctx.stage', 'name');
      const startedMs = performance.now();
      try {
        return await fn();
      } finally {
        state.stages.push({ name, ms: performance.now() - startedMs });
      }
    },
  };

  try {
    const value = await def.handle(job, ctx);
    if (committed !== undefined) return answer({ outcome: 'completed', result: committed.value });
    if (controller.signal.aborted)
      return answer({ outcome: 'aborted', reason: abortReason, error: controller.signal.reason });
    return answer({ outcome: 'completed', result: value });
  } catch (error) {
    return answer(outcomeOfThrown(error, job, controller.signal.aborted ? abortReason : undefined));
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
  }
}

/** How the engine ends an item whose handler threw `error` (src/consumer/job-outcome.ts). */
function outcomeOfThrown(error: unknown, job: Job, aborted: AbortReason | undefined): RunOutcome {
  if (aborted !== undefined) return { outcome: 'aborted', reason: aborted, error };
  if (error instanceof SkipError) return { outcome: 'skipped', error, reason: error.reason };
  if (error instanceof PermanentError)
    return {
      outcome: 'failed',
      error,
      failureClass: /^[a-z0-9_.:-]{1,64}$/.test(error.failureClass) ? error.failureClass : 'permanent',
    };
  if (error instanceof DeferError) return { outcome: 'released', error, runAt: error.runAt };
  if (error instanceof BlockOnError) return { outcome: 'blocked', error, dependencyKey: error.dependencyKey };
  if (job.attempt >= job.maxAttempts) return { outcome: 'failed', error, failureClass: 'error' };
  return { outcome: 'retry', error };
}
