import type { Transaction } from 'kysely';
import type { Executor } from '../ledger/connection.js';
import type { EnqueueInput } from '../ledger/inputs.js';
import type { ClaimedItem, EnqueueResult } from '../ledger/types.js';
import type { AfterCommit } from '../producer/producer.js';
import type { ConsumerLedger } from './ledger-port.js';
import { SkipError } from './errors.js';
import type { StageClock } from './stages.js';
import type { StepBook, StepOptions } from './steps.js';
import type { JobContext } from './types.js';
import type { DependencyPage, WorkflowInput, WorkflowResult } from '../ledger/workflow-types.js';

// A handler's `ctx` (the Context class) and what it reaches of its run
// (job-run.ts): kept apart so a run's lifecycle and the handler's view of it
// each stay readable.

/**
 * Enqueues inside a transaction the caller commits, and gives the wake-ups to publish after (Producer.enqueueWithin).
 */
export type Outbox = (trx: Executor, inputs: readonly EnqueueInput[]) => Promise<AfterCommit>;

/** What ctx.workflow and ctx.dependencies go through (the consumer's Producer and ledger; docs/design/workflows.md). */
export interface WorkflowPort {
  /** A workflow inside `trx`, added by `parentItem`'s handler, and its wake-ups to publish after the commit. */
  add(
    trx: Executor,
    input: WorkflowInput,
    parentItem: string,
  ): Promise<{ result: WorkflowResult; publish: () => Promise<void> }>;
  dependencies(itemId: string, page: { after?: string | null; limit?: number }): Promise<DependencyPage>;
}

/** What a handler's context uses of its run. */
export interface ContextRun<DB> {
  readonly item: ClaimedItem;
  readonly deps: {
    readonly ledger: ConsumerLedger;
    readonly outbox?: Outbox | undefined;
    readonly workflows?: WorkflowPort | undefined;
  };
  readonly signal: AbortSignal;
  /** Set by ctx.transaction once the completion committed with the handler's writes. */
  completedInTx: boolean;
  /** And whether that completion gave the item's lane a new head (false: the lane went idle). */
  laneAdvancedInTx: boolean | undefined;
  flushProgress(): Promise<void>;
  heartbeat(): Promise<boolean>;
  reportProgress(value: unknown): void;
  steps(): StepBook<DB>;
  /** Made at the first ctx.stage: most handlers name no stages. */
  stages(): StageClock;
}

/** A batch handler's context: its gatherer ends this run with others, and finds the run by its context. */
export function bindContext<DB>(ctx: Context<DB>, run: ContextRun<DB>): void {
  runOfContext.set(ctx, run as unknown as ContextRun<unknown>);
}

/** The run behind each context handed out (for a batch handler's gatherer, which ends items of many runs). */
const runOfContext = new WeakMap<object, ContextRun<unknown>>();

function runOf(ctx: object): ContextRun<unknown> {
  const run = runOfContext.get(ctx);
  if (run === undefined) throw new Error('not the context of a run');
  return run;
}

/** The item a run holds, by the context its handler was given. */
export function heldItemOf(ctx: object): ClaimedItem {
  return runOf(ctx).item;
}

/** The run's completion was committed elsewhere (a batch's ctx.transaction): its outcome is written. */
export function markCompletedElsewhere(ctx: object, laneAdvanced: boolean | undefined): void {
  const run = runOf(ctx);
  run.completedInTx = true;
  run.laneAdvancedInTx = laneAdvanced;
}

/** What a handler gets as `ctx`: a view of its run. */
export class Context<DB> implements JobContext<DB> {
  /** The ctx.transaction running now: its transaction, and the wake-ups of what ctx.enqueue put in it. */
  private open: { trx: Executor; after: Pick<AfterCommit, 'publish'>[] } | undefined;

  constructor(private readonly run: ContextRun<DB>) {}

  get signal(): AbortSignal {
    return this.run.signal;
  }

  async transaction<T>(fn: (trx: Transaction<DB>) => Promise<T>): Promise<T> {
    const run = this.run;
    if (run.completedInTx) throw new Error('ctx.transaction already completed this item');
    await run.flushProgress();
    let after: Pick<AfterCommit, 'publish'>[] = [];
    // The ledger runs fn again on a fresh connection after a connection lost before COMMIT, and reads
    // the item to settle a COMMIT that went unanswered: a dead connection costs no attempt. Only the
    // run that committed announces what it enqueued.
    const { value, laneAdvanced } = await run.deps.ledger.completeWithin(run.item, async (trx) => {
      after = [];
      this.open = { trx, after };
      try {
        return await fn(trx as unknown as Transaction<DB>);
      } finally {
        this.open = undefined;
      }
    });
    run.completedInTx = true;
    run.laneAdvancedInTx = laneAdvanced;
    for (const a of after) await a.publish();
    return value;
  }

  async enqueue(input: EnqueueInput): Promise<EnqueueResult> {
    const [result] = await this.enqueueMany([input]);
    if (!result) throw new Error('enqueue: no result');
    return result;
  }

  async enqueueMany(inputs: readonly EnqueueInput[]): Promise<EnqueueResult[]> {
    const open = this.open;
    if (open === undefined)
      throw new Error(
        'ctx.enqueue runs only inside ctx.transaction: follow-up items commit with the completion (docs/design.md ' +
          '§4, the outbox)',
      );
    const outbox = this.run.deps.outbox;
    if (outbox === undefined) throw new Error('ctx.enqueue needs the consumer: this run has no outbox');
    const done = await outbox(open.trx, inputs);
    open.after.push(done);
    return done.results;
  }

  async workflow(input: WorkflowInput): Promise<WorkflowResult> {
    const open = this.open;
    if (open === undefined)
      throw new Error(
        'ctx.workflow runs only inside ctx.transaction: its jobs commit with the completion (docs/design/workflows.md)',
      );
    const port = this.run.deps.workflows;
    if (port === undefined) throw new Error('ctx.workflow needs the consumer: this run has no workflow port');
    const done = await port.add(open.trx, input, this.run.item.id);
    open.after.push(done);
    return done.result;
  }

  dependencies(page: { after?: string | null; limit?: number } = {}): Promise<DependencyPage> {
    const port = this.run.deps.workflows;
    if (port === undefined) throw new Error('ctx.dependencies needs the consumer: this run has no workflow port');
    return port.dependencies(this.run.item.id, page);
  }

  checkpoint(value: unknown): Promise<boolean> {
    return this.run.deps.ledger.checkpoint(this.run.item, value);
  }

  heartbeat(): Promise<boolean> {
    return this.run.heartbeat();
  }

  progress(value: number | Record<string, unknown>): void {
    this.run.reportProgress(value);
  }

  step<T>(
    name: string,
    fn: ((trx: Transaction<DB>) => Promise<T>) | (() => Promise<T>),
    options?: StepOptions,
  ): Promise<T> {
    return this.run.steps().step(name, fn, options);
  }

  skip(reason?: string): never {
    throw new SkipError(reason);
  }

  stage<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
    return this.run.stages().stage(name, fn);
  }
}
