import { Abandoned } from '../errors.js';
import type { ClaimedItem } from '../ledger/types.js';
import { checkSchema, dottedPath, type SchemaCheck } from '../jobs/standard-schema.js';
import { groupView } from './coalescing.js';
import { JobAbortedError, type AbortReason } from './errors.js';
import {
  writeInvalidPayload,
  writeOutcome,
  writeUnowned,
  type Outcome,
  type OutcomeDeps,
  type Settlement,
} from './job-outcome.js';
import { LeaseKeeper, leaseTickMs, renewalPointMs, type LeaseEvent } from './lease-keeper.js';
import type { LeaseLedger } from './ledger-port.js';
import { ProgressReporter } from './progress.js';
import { afterRateLimited, rateGate } from './rate-gate.js';
import type { ProgressWriter } from './renewals.js';
import { StageClock } from './stages.js';
import { StepBook } from './steps.js';
import type { RunningJob } from './running-job.js';
import type { CoalescedView, Job, RegisteredHandler } from './types.js';
import { bindContext, Context, type ContextRun, type Outbox, type WorkflowPort } from './job-context.js';
import { traceAttempt, tracing } from '../tracing/process.js';

export type { Outcome, OutcomeDeps } from './job-outcome.js';
export type { AbortReason } from './errors.js';
export { heldItemOf, markCompletedElsewhere } from './job-context.js';
export type { RunningJob } from './running-job.js';

export interface JobRunDeps<DB> extends OutcomeDeps {
  handlers: ReadonlyMap<string, RegisteredHandler<DB>>;
  /**
   * What ctx.enqueue enqueues through, inside ctx.transaction (the consumer's Producer); ctx.enqueue throws without it.
   */
  outbox?: Outbox;
  /** What ctx.workflow and ctx.dependencies go through (docs/design/workflows.md); they throw without it. */
  workflows?: WorkflowPort;
  /** What the lease keepers renew through (the consumer's RenewalBatch); the ledger itself when absent. */
  renewals?: LeaseLedger;
  /** What ctx.progress reports are written through (the consumer's ProgressBatch); the ledger itself when absent. */
  progress?: ProgressWriter;
  /** Counts what a run's steps and progress did (consumer counters). */
  counted?: (counter: 'stepsRecorded' | 'stepsResumed' | 'progressWrites') => void;
  /** A ctx.stage ended: its name and how long it ran (ms); the consumer's `stage` event. */
  onStage?: (item: ClaimedItem, stage: string, ms: number) => void;
  /**
   * The handler has settled (or never ran): the item's executor slot is free,
   * its outcome may still be being written. Called once per run, synchronously.
   */
  onSettled?: (run: RunningJob) => void;
}

/** `done` of a run not started yet: never settles. */
const NOT_STARTED: Promise<Outcome> = new Promise<Outcome>(() => undefined);

/**
 * Deadlines shorter than this many ticks of the consumer's clock get a timer
 * of their own; longer ones (the 10 min default) are checked on the tick,
 * late by at most one tick (a second at most, 5% of the deadline at most).
 */
const CLOCK_DEADLINE_TICKS = 20;

/**
 * One claimed item's run through its handler to its written outcome
 * (docs/design/handlers.md). Nothing happens until `start()`: register the run first, so
 * `onSettled` always finds it.
 */
export function runJob<DB>(deps: JobRunDeps<DB>, item: ClaimedItem, claimedAtMs: number = Date.now()): RunningJob {
  return new JobRun(deps, item, claimedAtMs);
}

/** What the pre-checks pass on to the handler's run. */
interface Runnable<DB> {
  def: RegisteredHandler<DB>;
  payload: unknown;
  /** A coalesced group's view, its payloads parsed by the schema. */
  coalesced: CoalescedView | undefined;
}

/**
 * One item's run, in three steps: the pre-checks (a handler for the type, a
 * payload its schema accepts), the handler's run (its signal, lease and
 * deadline), and the outcome written from how it settled (job-outcome.ts).
 *
 * A class rather than closures: a consumer starts tens of thousands of
 * these a second, and every closure, promise and timer per item is garbage
 * to collect. The lease keeper is made only when the first renewal falls
 * due (or the handler asks for one), which a short handler never reaches.
 */
class JobRun<DB> implements RunningJob, ContextRun<DB> {
  done: Promise<Outcome> = NOT_STARTED;
  laneAdvanced: boolean | undefined;
  keyAdmitted: boolean | undefined;
  /** Set by ctx.transaction once the completion committed with the handler's writes. */
  completedInTx = false;
  /** And whether that completion gave the item's lane a new head (false: the lane went idle). */
  laneAdvancedInTx: boolean | undefined;
  handlerMs: number | undefined;
  /** What the handler threw, once it has settled (the attempt's span records it). */
  thrown: unknown;
  private settledCalled = false;
  private controller: AbortController | undefined;
  private abortReason: AbortReason | undefined;
  private handlerRunning = false;
  private graceTimer: NodeJS.Timeout | undefined;
  /** A deadline the clock enforces (long ones; short ones get a timer of their own). */
  private deadlineAtMs: number | undefined;
  private leaseLost = false;
  private keeper: LeaseKeeper | undefined;
  /** No renewal may start any more: the handler has settled. */
  private keeperStopped = false;
  /** Rejects the wait for the handler (abandon); set while the handler runs. */
  private stopWaiting: ((reason: unknown) => void) | undefined;
  private abandoned = false;
  /** Made at the first ctx.progress / ctx.step: most handlers use neither. */
  private reporter: ProgressReporter | undefined;
  private stepBook: StepBook<DB> | undefined;
  /** Made at the first ctx.stage: most handlers name no stages. */
  private stageClock: StageClock | undefined;

  constructor(
    readonly deps: JobRunDeps<DB>,
    readonly item: ClaimedItem,
    private readonly claimedAtMs: number,
  ) {}

  start(): void {
    if (this.done !== NOT_STARTED) throw new Error('run already started');
    // With OpenTelemetry loaded the attempt runs in its process span (src/tracing/process.ts).
    this.done = tracing() ? traceAttempt(this, () => this.execute()) : this.execute();
  }

  private markSettled(): void {
    if (this.settledCalled) return;
    this.settledCalled = true;
    this.deps.onSettled?.(this);
  }

  get signal(): AbortSignal {
    // Made on first use: most handlers never look, and a signal per item is not free.
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortReason !== undefined) this.controller.abort(this.abortError());
    }
    return this.controller.signal;
  }

  abort(reason: AbortReason): void {
    if (this.abortReason !== undefined) return;
    this.abortReason = reason;
    this.controller?.abort(this.abortError());
    // A handler that ignores its abort is not waited on forever: its lease is left to expire.
    if (this.handlerRunning && reason !== 'shutdown')
      this.graceTimer = setTimeout(() => this.abandon(), this.deps.settings.abortGraceMs);
  }

  abandon(): void {
    this.abandoned = true;
    this.stopWaiting?.(new Abandoned());
  }

  tick(nowMs: number): boolean {
    this.reporter?.tick(nowMs);
    if (this.deadlineAtMs !== undefined && nowMs >= this.deadlineAtMs) {
      this.deadlineAtMs = undefined;
      this.abort('deadline');
    }
    return this.renewIfDue(nowMs, false);
  }

  joinRenewals(nowMs: number): void {
    this.renewIfDue(nowMs, true);
  }

  private renewIfDue(nowMs: number, joining: boolean): boolean {
    if (this.keeperStopped) return false;
    if (this.keeper === undefined && nowMs < this.claimedAtMs + renewalPointMs(this.deps.settings.leaseMs, joining))
      return false;
    return this.leaseKeeper().tick(nowMs, joining);
  }

  heartbeat(): Promise<boolean> {
    return this.keeperStopped ? Promise.resolve(false) : this.leaseKeeper().renewNow();
  }

  get progressPercent(): number | undefined {
    const latest = this.reporter?.latest;
    return typeof latest === 'number' ? latest : undefined;
  }

  reportProgress(value: unknown): void {
    this.reporter ??= new ProgressReporter(
      this.deps.progress ?? { save: (handle, progress) => this.deps.ledger.saveProgress([{ handle, progress }]) },
      this.item,
      () => this.deps.counted?.('progressWrites'),
    );
    this.reporter.report(value);
  }

  /** Writes the last progress report not written yet: before anything that ends the item. */
  flushProgress(): Promise<void> {
    return this.reporter?.flush() ?? Promise.resolve();
  }

  steps(): StepBook<DB> {
    this.stepBook ??= new StepBook<DB>(
      this.deps.ledger,
      this.item,
      () => this.signal,
      (counter) => this.deps.counted?.(counter),
    );
    return this.stepBook;
  }

  stages(): StageClock {
    this.stageClock ??= new StageClock(this.item, this.deps.onStage);
    return this.stageClock;
  }

  checkLedger(): void {
    if (this.handlerRunning && this.abortReason === undefined) void this.heartbeat();
  }

  private leaseKeeper(): LeaseKeeper {
    this.keeper ??= new LeaseKeeper(
      this.deps.renewals ?? this.deps.ledger,
      this.item,
      this.deps.settings.leaseMs,
      (event) => this.onLeaseEvent(event),
      this.claimedAtMs,
    );
    return this.keeper;
  }

  private onLeaseEvent(event: LeaseEvent): void {
    if (event === 'lost') {
      this.leaseLost = true;
      // The abort reason handlers see keeps its documented spelling; the outcome is 'leaseLost'.
      this.abort('lease_lost');
    } else this.abort('cancelled');
  }

  private abortError(): JobAbortedError {
    return new JobAbortedError(this.abortReason ?? 'shutdown');
  }

  private async execute(): Promise<Outcome> {
    const checked = this.preCheck();
    const runnable = checked instanceof Promise ? await checked : checked;
    if (typeof runnable === 'string') {
      this.markSettled(); // no handler ran: the slot frees with the outcome written
      return runnable;
    }
    const limit = runnable.def.rateLimit;
    const gate = limit === undefined ? undefined : await rateGate(this.deps, this.item, limit, runnable.payload);
    if (gate !== undefined && 'outcome' in gate) {
      this.markSettled();
      return gate.outcome;
    }
    const settlement = await this.runHandler(runnable);
    this.thrown = settlement.thrown;
    if (gate !== undefined) await afterRateLimited(this.deps, this.item, gate.key, settlement.thrown);
    await this.flushProgress();
    const outcome = await writeOutcome(this.deps, settlement);
    this.laneAdvanced = settlement.laneAdvanced;
    this.keyAdmitted = settlement.keyAdmitted;
    if (this.stageClock !== undefined) {
      const { item } = this;
      this.deps.log.debug(
        { id: item.id, type: item.type, attempt: item.attempt, outcome, stages: this.stageClock.summary() },
        'stage timings',
      );
    }
    return outcome;
  }

  /**
   * What ends the item before its handler runs: no handler here for its type, a payload its schema refuses.
   * Synchronous unless the schema's validator answers with a promise (an async Standard Schema).
   */
  private preCheck(): Runnable<DB> | Promise<Runnable<DB> | Outcome> {
    const { deps, item } = this;
    const def = deps.handlers.get(item.type);
    if (!def) return writeUnowned(deps, item);
    const view =
      item.group === undefined && def.coalesce === undefined
        ? { payload: item.payload, coalesced: undefined }
        : groupView(item, def.coalesce);
    if (!def.schema) return { def, payload: view.payload, coalesced: view.coalesced };
    // A group's payloads are each checked too: one the schema refuses ends the group, as a lone item's would.
    const values = [view.payload, ...(view.coalesced?.payloads ?? [])];
    const checks = values.map((v) => checkSchema(def.schema!, v));
    if (checks.some((c) => c instanceof Promise))
      return Promise.all(checks).then<Runnable<DB> | Outcome>((settled) => this.afterSchema(def, view, settled));
    return this.afterSchema(def, view, checks as SchemaCheck[]);
  }

  private afterSchema(
    def: RegisteredHandler<DB>,
    view: { payload: unknown; coalesced: CoalescedView | undefined },
    checks: SchemaCheck[],
  ): Runnable<DB> | Promise<Outcome> {
    const refused = checks.findIndex((c) => !c.ok);
    const bad = checks[refused];
    if (bad !== undefined && !bad.ok) {
      // Index 0 is the payload the handler gets; the rest are a group's payloads[k].
      const where = (path: readonly PropertyKey[]): string => {
        const inner = dottedPath(path);
        if (refused === 0) return inner || '(payload)';
        return `payloads[${refused - 1}]${inner === '' ? '' : inner.startsWith('[') ? inner : `.${inner}`}`;
      };
      return writeInvalidPayload(
        this.deps,
        this.item,
        bad.issues.map((i) => `${where(i.path)}: ${i.message}`).join('; '),
      );
    }
    const parsed = checks.map((c) => (c.ok ? c.value : undefined));
    const coalesced =
      view.coalesced?.payloads === undefined ? view.coalesced : { ...view.coalesced, payloads: parsed.slice(1) };
    return { def, payload: parsed[0], coalesced };
  }

  /** Runs the handler under its signal, lease and deadline, until it settles (or is abandoned). */
  private async runHandler({ def, payload, coalesced }: Runnable<DB>): Promise<Settlement> {
    const { item, deps } = this;
    const job: Job<unknown> = {
      id: item.id,
      queue: item.queue,
      type: item.type,
      lane: item.lane,
      laneSeq: item.laneSeq,
      payload,
      attempt: item.attempt,
      maxAttempts: item.maxAttempts,
      checkpoint: item.checkpoint,
      fence: { token: item.leaseToken, epoch: item.epoch, attempt: item.attempt },
      enqueuedAt: item.createdAt,
    };
    if (coalesced !== undefined) job.coalesced = coalesced;

    const deadlineMs = def.deadlineMs ?? deps.settings.deadlineMs;
    // A long deadline (the default is 10 min) is checked on the clock's tick,
    // late by at most a tick: no timer per item. A short one gets its own timer.
    const onClock = deadlineMs >= CLOCK_DEADLINE_TICKS * leaseTickMs(deps.settings.leaseMs);
    const deadline = deadlineMs > 0 && !onClock ? setTimeout(() => this.abort('deadline'), deadlineMs) : undefined;
    if (deadlineMs > 0 && onClock) this.deadlineAtMs = Date.now() + deadlineMs;
    this.handlerRunning = true;
    const handlerStart = performance.now();

    let returned: { value: unknown } | undefined;
    let thrown: unknown;
    /** Why the signal had aborted when the handler settled (a renewal in flight may abort it later). */
    let abortedWith: AbortReason | undefined;
    try {
      const ctx = new Context<DB>(this);
      if (def.batch !== undefined) bindContext(ctx, this);
      const result = def.handle(job, ctx);
      returned = { value: await this.waitFor(result instanceof Promise ? result : Promise.resolve(result)) };
    } catch (error) {
      thrown = error;
    } finally {
      abortedWith = this.abortReason;
      this.handlerRunning = false;
      this.deadlineAtMs = undefined;
      this.stopWaiting = undefined;
      if (deadline) clearTimeout(deadline);
      if (this.graceTimer) clearTimeout(this.graceTimer);
      this.handlerMs = performance.now() - handlerStart;
      this.markSettled();
      this.keeperStopped = true;
      const renewal = this.keeper?.stop();
      if (renewal) await renewal;
    }
    return {
      item,
      returned,
      thrown,
      abandoned: thrown instanceof Abandoned,
      abortedWith,
      abortReason: this.abortReason,
      completedInTx: this.completedInTx,
      laneAdvanced: this.laneAdvancedInTx,
      leaseLost: this.leaseLost,
    };
  }

  /** The handler's promise, or a rejection with Abandoned once abandon() is called. */
  private waitFor(handler: Promise<unknown>): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (this.abandoned) return reject(new Abandoned());
      this.stopWaiting = reject;
      handler.then(resolve, reject);
    });
  }
}
