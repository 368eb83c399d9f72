// lanewake/testing: helpers for testing your handlers (docs/testing.md).
import type { HandlerEntry } from '../consumer/types.js';
import type { Ledger } from '../ledger/ledger.js';
import { drainQueue, type DrainOptions, type DrainedItem } from './drain.js';
import { runInline, type RunOptions, type RunResult, type TestJob, type TypedEntry } from './inline-run.js';

export type { DrainOptions, DrainedItem } from './drain.js';
export type { RunOptions, RunOutcome, RunResult, TestJob, TypedEntry } from './inline-run.js';

export interface TestRunnerOptions {
  /** The ledger `drain()` runs queues on (a database your tests migrated: `ledger.migrate()`). `run()` needs none. */
  ledger?: Ledger;
}

export interface TestRunner {
  /**
   * Runs one handler inline against a job: no ledger, no lease. `ctx.transaction`
   * runs on `options.db` (your transaction, or a Kysely instance), the rest of
   * ctx in memory. A typed handler (`jobs.handlers(…)[type]`) takes its
   * schema's input as `payload` and is checked against the schema as the consumer would.
   */
  run<In, DB>(handler: TypedEntry<In, DB>, job: TestJob<In>, options?: RunOptions<DB>): Promise<RunResult>;
  run<P, DB>(
    handler: HandlerEntry<DB> & ((job: { payload: P }, ...rest: never[]) => unknown),
    job: TestJob<P>,
    options?: RunOptions<DB>,
  ): Promise<RunResult>;
  /**
   * Runs a queue in process against the ledger until it is idle (no due
   * lane head, nothing processing), through a real Consumer that sweeps the
   * ledger (no Redis), and answers each item it ran: its id, type, state,
   * result, error and attempts.
   */
  drain<DB>(options: DrainOptions<DB>): Promise<DrainedItem[]>;
}

/** The test helper: `const runner = createTestRunner({ ledger })`. */
export function createTestRunner(options: TestRunnerOptions = {}): TestRunner {
  return {
    run: <DB>(handler: HandlerEntry<DB>, job: TestJob, runOptions?: RunOptions<DB>) =>
      runInline(handler, job, runOptions),
    drain: (drainOptions) => {
      if (options.ledger === undefined) throw new Error('drain() needs a ledger: createTestRunner({ ledger })');
      return drainQueue(options.ledger, drainOptions);
    },
  };
}
