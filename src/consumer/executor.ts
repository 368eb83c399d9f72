import type { Transaction } from 'kysely';
import { ValidationError } from '../errors.js';
import type { Logger } from '../log.js';
import type { FinalizeResult, Ledger } from '../ledger/ledger.js';
import { LeaseLostError } from '../ledger/sql/transition.js';
import type { ClaimedItem } from '../ledger/types.js';
import { retryOnConflict } from '../ledger/retry.js';
import type { BatchCompleter } from './completer.js';
import { BlockOnError, DeferError, PermanentError } from './errors.js';
import { LeaseKeeper, leaseTickMs, type LeaseEvent } from './lease-keeper.js';
import type { ConsumerSettings } from './options.js';
import type { Job, JobContext, RegisteredHandler } from './types.js';

export type Outcome =
  | 'completed'
  | 'retried'
  | 'dead'
  | 'released'
  | 'blocked'
  | 'cancelled'
  | 'skipped'
  /** The lease was lost (or the finalize lost its CAS): nothing was written by this holder. */
  | 'lease_lost'
  /** The handler did not settle after being aborted: its lease is left to expire. */
  | 'abandoned';

export type AbortReason = 'lease_lost' | 'deadline' | 'cancelled' | 'shutdown';

export interface RunningJob {
  item: ClaimedItem;
  /** Runs the handler and writes the outcome; `done` settles with it. Call once. */
  start(): void;
  /** How long the handler ran (ms), once it has settled; undefined if it never ran. */
  readonly handlerMs: number | undefined;
  /** Aborts the handler's signal (shutdown); the outcome then follows the abort rules. */
  abort(reason: AbortReason): void;
  /** Stop waiting for the handler: leave its lease to expire, write nothing. */
  abandon(): void;
  /** The consumer's clock: renews the lease when due, enforces a long deadline. */
  tick(nowMs: number): void;
  /** The outcome is written (or given up on). */
  done: Promise<Outcome>;
  /** Once done: false when the write said the item's lane has nothing left waiting; undefined when not known. */
  readonly laneAdvanced: boolean | undefined;
}

export interface ExecutorDeps<DB> {
  ledger: Ledger;
  completer: BatchCompleter;
  settings: ConsumerSettings;
  handlers: ReadonlyMap<string, RegisteredHandler<DB>>;
  log: Logger;
  /** The item went back to pending with a future due time: arrange a wake-up for then. */
  onDelayed?: (item: ClaimedItem, delayMs: number) => void;
  /**
   * The handler has settled (or never ran): the item's executor slot is free,
   * its outcome may still be being written. Called once per run, synchronously.
   */
  onSettled?: (run: RunningJob) => void;
}

class Abandoned extends Error {}

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
 * (DESIGN §4). Nothing happens until `start()`: register the run first, so
 * `onSettled` always finds it.
 */
export function runJob<DB>(deps: ExecutorDeps<DB>, item: ClaimedItem, claimedAtMs: number = Date.now()): RunningJob {
  return new JobRun(deps, item, claimedAtMs);
}

/**
 * One item's run. A class rather than closures: a consumer starts tens of
 * thousands of these a second, and every closure, promise and timer per item
 * is garbage to collect. The lease keeper is made only when the first
 * renewal falls due (or the handler asks for one), which a short handler
 * never reaches.
 */
class JobRun<DB> implements RunningJob {
  done: Promise<Outcome> = NOT_STARTED;
  laneAdvanced: boolean | undefined;
  /** Set by ctx.transaction once the completion committed with the handler's writes. */
  completedInTx = false;
  handlerMs: number | undefined;
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
  private readonly firstRenewalAtMs: number;
  /** Rejects the wait for the handler (abandon); set while the handler runs. */
  private stopWaiting: ((reason: unknown) => void) | undefined;
  private abandoned = false;

  constructor(
    readonly deps: ExecutorDeps<DB>,
    readonly item: ClaimedItem,
    private readonly claimedAtMs: number,
  ) {
    const leaseMs = deps.settings.leaseMs;
    this.firstRenewalAtMs = claimedAtMs + leaseMs - Math.floor((leaseMs * 2) / 3);
  }

  start(): void {
    if (this.done !== NOT_STARTED) throw new Error('run already started');
    this.done = this.execute();
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
    if (this.handlerRunning && reason !== 'shutdown') this.graceTimer = setTimeout(() => this.abandon(), this.deps.settings.abortGraceMs);
  }

  abandon(): void {
    this.abandoned = true;
    this.stopWaiting?.(new Abandoned());
  }

  tick(nowMs: number): void {
    if (!this.keeperStopped && (this.keeper !== undefined || nowMs >= this.firstRenewalAtMs)) this.leaseKeeper().tick(nowMs);
    if (this.deadlineAtMs !== undefined && nowMs >= this.deadlineAtMs) {
      this.deadlineAtMs = undefined;
      this.abort('deadline');
    }
  }

  heartbeat(): Promise<boolean> {
    return this.keeperStopped ? Promise.resolve(false) : this.leaseKeeper().renewNow();
  }

  private leaseKeeper(): LeaseKeeper {
    this.keeper ??= new LeaseKeeper(this.deps.ledger, this.item, this.deps.settings.leaseMs, (event) => this.onLeaseEvent(event), this.claimedAtMs);
    return this.keeper;
  }

  private onLeaseEvent(event: LeaseEvent): void {
    if (event === 'lost') {
      this.leaseLost = true;
      this.abort('lease_lost');
    } else this.abort('cancelled');
  }

  private abortError(): Error {
    return new Error(`aborted: ${(this.abortReason ?? 'shutdown').replace('_', ' ')}`);
  }

  /** The handler's promise, or a rejection with Abandoned once abandon() is called. */
  private waitFor(handler: Promise<unknown>): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (this.abandoned) return reject(new Abandoned());
      this.stopWaiting = reject;
      handler.then(resolve, reject);
    });
  }

  private async execute(): Promise<Outcome> {
    const { deps, item } = this;
    const { ledger, settings, log } = deps;
    const def = deps.handlers.get(item.type);
    if (!def) {
      const outcome =
        settings.unknownType === 'release'
          ? outcomeOf(await finalizeSafely(deps, item, () => ledger.release(item, { delayMs: settings.unknownTypeReleaseMs, reason: 'no handler here' })), 'released')
          : outcomeOf(await finalizeSafely(deps, item, () => ledger.fail(item, { error: `no handler for type ${item.type}`, failureClass: 'unowned' })), 'dead');
      this.markSettled(); // no handler ran: the slot frees with the outcome written
      return outcome;
    }
    let payload: unknown = item.payload;
    if (def.schema) {
      const parsed = def.schema.safeParse(item.payload);
      if (!parsed.success) {
        const error = `payload does not match the handler's schema: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(payload)'}: ${i.message}`).join('; ')}`;
        const outcome = outcomeOf(await finalizeSafely(deps, item, () => ledger.fail(item, { error, failureClass: 'invalid_payload' })), 'dead');
        this.markSettled();
        return outcome;
      }
      payload = parsed.data;
    }

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

    const deadlineMs = def.deadlineMs ?? settings.deadlineMs;
    // A long deadline (the default is 10 min) is checked on the clock's tick,
    // late by at most a tick: no timer per item. A short one gets its own timer.
    const onClock = deadlineMs >= CLOCK_DEADLINE_TICKS * leaseTickMs(settings.leaseMs);
    const deadline = deadlineMs > 0 && !onClock ? setTimeout(() => this.abort('deadline'), deadlineMs) : undefined;
    if (deadlineMs > 0 && onClock) this.deadlineAtMs = Date.now() + deadlineMs;
    this.handlerRunning = true;
    const handlerStart = performance.now();

    let returned: { value: unknown } | undefined;
    let thrown: unknown;
    try {
      const result = def.handle(job, new Context<DB>(this));
      returned = { value: await this.waitFor(result instanceof Promise ? result : Promise.resolve(result)) };
    } catch (error) {
      thrown = error;
    } finally {
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

    if (thrown instanceof Abandoned) {
      log.warn({ id: item.id, type: item.type, reason: this.abortReason }, 'handler did not settle after abort; its lease is left to expire');
      return 'abandoned';
    }
    if (this.completedInTx) return 'completed';
    if (this.leaseLost || thrown instanceof LeaseLostError) {
      log.warn({ id: item.id, type: item.type }, 'lease lost; this holder writes nothing');
      return 'lease_lost';
    }
    if (returned) {
      const value = returned.value;
      const r = await finalizeSafely(deps, item, () => deps.completer.complete(item, value));
      this.laneAdvanced = r?.laneAdvanced;
      return outcomeOf(r, r && r.state === 'dead' ? 'dead' : 'completed');
    }
    return finalizeError(deps, item, thrown, this.abortReason);
  }
}

/** What a handler gets as `ctx`: a view of its run. */
class Context<DB> implements JobContext<DB> {
  constructor(private readonly run: JobRun<DB>) {}

  get signal(): AbortSignal {
    return this.run.signal;
  }

  async transaction<T>(fn: (trx: Transaction<DB>) => Promise<T>): Promise<T> {
    const run = this.run;
    if (run.completedInTx) throw new Error('ctx.transaction already completed this item');
    const { ledger } = run.deps;
    const value = await retryOnConflict(() =>
      ledger.db.transaction().execute(async (trx) => {
        const v = await fn(trx as unknown as Transaction<DB>);
        await ledger.completeInTransaction(trx, run.item, v === undefined ? undefined : v);
        return v;
      }),
    );
    run.completedInTx = true;
    return value;
  }

  checkpoint(value: unknown): Promise<boolean> {
    return this.run.deps.ledger.checkpoint(this.run.item, value);
  }

  heartbeat(): Promise<boolean> {
    return this.run.heartbeat();
  }
}

async function finalizeError<DB>(deps: ExecutorDeps<DB>, item: ClaimedItem, error: unknown, abortReason: AbortReason | undefined): Promise<Outcome> {
  const { ledger, settings, log } = deps;
  if (abortReason === 'cancelled') {
    return outcomeOf(await finalizeSafely(deps, item, () => ledger.cancelClaimed(item)), 'cancelled');
  }
  if (abortReason === 'deadline') {
    log.warn({ id: item.id, type: item.type, attempt: item.attempt }, 'deadline passed; released without spending an attempt');
    return delayed(
      deps,
      item,
      settings.deadlineBackoffMs,
      outcomeOf(await finalizeSafely(deps, item, () => ledger.release(item, { delayMs: settings.deadlineBackoffMs, reason: 'deadline' })), 'released'),
    );
  }
  if (abortReason === 'shutdown') {
    return outcomeOf(await finalizeSafely(deps, item, () => ledger.release(item, { reason: 'shutdown' })), 'released');
  }
  if (error instanceof PermanentError) {
    log.warn({ id: item.id, type: item.type, class: error.failureClass }, 'permanent failure: dead');
    const failureClass = /^[a-z0-9_.:-]{1,64}$/.test(error.failureClass) ? error.failureClass : 'permanent';
    return outcomeOf(await finalizeSafely(deps, item, () => ledger.fail(item, { error, failureClass })), 'dead');
  }
  if (error instanceof DeferError) {
    const delayMs = Math.max(0, error.runAt.getTime() - Date.now());
    return delayed(deps, item, delayMs, outcomeOf(await finalizeSafely(deps, item, () => ledger.release(item, { delayMs, reason: error.reason })), 'released'));
  }
  if (error instanceof BlockOnError) {
    return outcomeOf(
      await finalizeSafely(deps, item, () =>
        ledger.block(item, {
          dependencyKey: error.dependencyKey,
          maxWaitMs: error.maxWaitMs,
          ...(error.probeAfterMs !== undefined ? { probeAfterMs: error.probeAfterMs } : {}),
        }),
      ),
      'blocked',
    );
  }
  const r = await finalizeSafely(deps, item, () => ledger.retry(item, { error, backoff: settings.backoff }));
  if (r?.state === 'dead') log.warn({ id: item.id, type: item.type, attempt: item.attempt }, 'attempt budget spent: dead');
  return delayed(deps, item, r?.delayMs ?? 0, outcomeOf(r, r?.state === 'dead' ? 'dead' : 'retried'));
}

function delayed<DB>(deps: ExecutorDeps<DB>, item: ClaimedItem, delayMs: number, outcome: Outcome): Outcome {
  if ((outcome === 'retried' || outcome === 'released') && delayMs > 0) deps.onDelayed?.(item, delayMs);
  return outcome;
}

/**
 * Finalization runs on its own clock, not the handler's signal, so shutdown
 * cannot strand an item whose side effects already happened. A transient
 * failure is retried within the timeout: the CAS makes a repeat harmless (it
 * can only lose). A lost CAS is never retried.
 */
async function finalizeSafely<DB, R extends FinalizeResult>(
  deps: ExecutorDeps<DB>,
  item: ClaimedItem,
  write: () => Promise<R>,
): Promise<R | undefined> {
  const deadline = Date.now() + deps.settings.finalizeTimeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      const r = await write();
      if (!r.won) deps.log.warn({ id: item.id, type: item.type }, 'finalize lost its CAS: the item had moved on');
      return r;
    } catch (error) {
      if (error instanceof ValidationError) {
        deps.log.error({ id: item.id, err: error.message }, 'finalize rejected as invalid; the lease will expire');
        return undefined;
      }
      const wait = Math.min(1000, 50 * 2 ** attempt);
      if (Date.now() + wait > deadline) {
        deps.log.error({ id: item.id, err: (error as Error).message }, 'finalize failed; the lease will expire and the item be reclaimed');
        return undefined;
      }
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}

function outcomeOf(r: FinalizeResult | undefined, ifWon: Outcome): Outcome {
  return r?.won ? ifWon : 'lease_lost';
}
