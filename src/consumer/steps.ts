import type { Transaction } from 'kysely';
import { ValidationError } from '../errors.js';
import { validate, stepName } from '../ledger/validation.js';
import type { ClaimedItem } from '../ledger/types.js';
import type { StepLedger } from './ledger-port.js';

export interface StepOptions {
  /** Run `fn(trx)` in a ledger transaction that also records the step: its writes and the record commit together. */
  transaction?: boolean;
}

/**
 * One run's durable steps (ctx.step, docs/design/handlers.md): the item's steps
 * already done are read from the ledger at the first ctx.step of the run; a
 * step done before returns its stored result, any other runs and is
 * recorded under the lease. Two calls of one name in a run share the first's outcome.
 */
export class StepBook<DB> {
  private done: Promise<Map<string, unknown>> | undefined;
  private readonly inFlight = new Map<string, Promise<unknown>>();

  constructor(
    private readonly ledger: StepLedger,
    private readonly item: ClaimedItem,
    private readonly signal: () => AbortSignal,
    private readonly counted: (what: 'stepsRecorded' | 'stepsResumed') => void,
  ) {}

  step<T>(
    name: string,
    fn: ((trx: Transaction<DB>) => Promise<T>) | (() => Promise<T>),
    options: StepOptions = {},
  ): Promise<T> {
    validate(stepName, name, 'ctx.step', 'name');
    if (typeof fn !== 'function')
      throw new ValidationError([{ field: 'fn', message: 'must be a function' }], 'ctx.step');
    const running = this.inFlight.get(name);
    if (running !== undefined) return running as Promise<T>;
    const run = this.runOnce(name, fn, options.transaction === true);
    this.inFlight.set(name, run);
    // A step that failed may be tried again in this run; one that finished stays in `done`.
    run.catch(() => this.inFlight.delete(name));
    return run;
  }

  private async runOnce<T>(name: string, fn: (trx: Transaction<DB>) => Promise<T>, inTransaction: boolean): Promise<T> {
    const done = await this.stepsDone();
    if (done.has(name)) {
      this.counted('stepsResumed');
      return done.get(name) as T;
    }
    this.signal().throwIfAborted();
    let value: T;
    if (inTransaction) {
      value = await this.ledger.recordStepWithin(this.item, name, (trx) => fn(trx as unknown as Transaction<DB>));
    } else {
      value = await (fn as () => Promise<T>)();
      // Recorded even if the run was aborted meanwhile (a shutdown, a deadline): fn's work is done, and the CAS says
      // whether this holder may say so.
      await this.ledger.recordStep(this.item, name, value);
    }
    done.set(name, value);
    this.counted('stepsRecorded');
    return value;
  }

  private stepsDone(): Promise<Map<string, unknown>> {
    if (this.done === undefined) {
      const loading = this.ledger.steps(this.item.id).then((steps) => new Map(steps.map((s) => [s.name, s.result])));
      this.done = loading;
      loading.catch(() => (this.done = undefined));
    }
    return this.done;
  }
}
