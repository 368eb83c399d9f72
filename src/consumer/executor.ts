import type { Transaction } from 'kysely';
import { LeaseLostError, ValidationError } from '../errors.js';
import type { Logger } from '../log.js';
import { sleep } from '../sleep.js';
import type { FinalizeResult, Ledger } from '../ledger/ledger.js';
import type { ClaimedItem } from '../ledger/types.js';
import { encodeJson } from '../ledger/validation.js';
import type { BatchCompleter } from './completer.js';
import { BlockOnError, DeferError, JobAbortedError, PermanentError, type AbortReason } from './errors.js';
import { LeaseKeeper, leaseTickMs, leaseWriteRetryMs, type LeaseEvent } from './lease-keeper.js';
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

export type { AbortReason } from './errors.js';

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
  /**
   * Renews the lease now, so a cancel the ledger holds for this item aborts
   * the handler at once (a control-stream cancel is only a hint: the ledger decides).
   */
  checkLedger(): void;
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
  /** Types this consumer has already said it has no handler for (said once per type). */
  unownedTypesSeen?: Set<string>;
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
 * (docs/design.md §4). Nothing happens until `start()`: register the run first, so
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

  checkLedger(): void {
    if (this.handlerRunning && this.abortReason === undefined) void this.heartbeat();
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

  private abortError(): JobAbortedError {
    return new JobAbortedError(this.abortReason ?? 'shutdown');
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
      const outcome = await finalizeUnowned(deps, item);
      this.markSettled(); // no handler ran: the slot frees with the outcome written
      return outcome;
    }
    let payload: unknown = item.payload;
    if (def.schema) {
      const parsed = def.schema.safeParse(item.payload);
      if (!parsed.success) {
        const error = `payload does not match the handler's schema: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(payload)'}: ${i.message}`).join('; ')}`;
        const r = await finalizeSafely(deps, item, () => ledger.fail(item, { error, failureClass: 'invalid_payload' }));
        if (r?.won) logDeath(deps, item, 'invalid_payload', "payload does not match the handler's schema");
        const outcome = outcomeOf(r, 'dead');
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
    /** Why the signal had aborted when the handler settled (a renewal in flight may abort it later). */
    let abortedWith: AbortReason | undefined;
    try {
      const result = def.handle(job, new Context<DB>(this));
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

    if (thrown instanceof Abandoned) {
      log.warn({ id: item.id, type: item.type, reason: this.abortReason }, 'handler did not settle after abort; its lease is left to expire');
      return 'abandoned';
    }
    if (this.completedInTx) return 'completed';
    if (returned && abortedWith !== undefined) {
      // It may have skipped its work or finished it; the engine cannot tell. Skipped work recorded
      // as completed would be lost for good, while finished work run again is the duplicate
      // at-least-once delivery already allows: so the item ends by the abort reason.
      log.warn(
        { id: item.id, type: item.type, attempt: item.attempt, reason: abortedWith },
        'handler returned after its signal aborted: the item ends by the abort reason, not completed (throw ctx.signal.reason: ctx.signal.throwIfAborted())',
      );
      returned = undefined;
    }
    if (this.leaseLost || thrown instanceof LeaseLostError) {
      log.warn({ id: item.id, type: item.type }, 'lease lost; this holder writes nothing');
      return 'lease_lost';
    }
    if (returned) {
      const value = returned.value;
      const r = await finalizeSafely(deps, item, () => deps.completer.complete(item, value));
      this.laneAdvanced = r?.laneAdvanced;
      if (r?.won && r.state === 'dead') {
        logDeath(deps, item, encodeJson(value) === undefined ? 'invalid_result' : 'result_too_large', 'the handler result cannot be stored');
      }
      return outcomeOf(r, r && r.state === 'dead' ? 'dead' : 'completed');
    }
    return finalizeError(deps, item, thrown, abortedWith ?? this.abortReason);
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
    // The ledger runs fn again on a fresh connection after a connection lost before COMMIT, and reads
    // the item to settle a COMMIT that went unanswered: a dead connection costs no attempt.
    const value = await run.deps.ledger.completeWithin(run.item, (trx) => fn(trx as unknown as Transaction<DB>));
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
    const failureClass = /^[a-z0-9_.:-]{1,64}$/.test(error.failureClass) ? error.failureClass : 'permanent';
    const r = await finalizeSafely(deps, item, () => ledger.fail(item, { error, failureClass }));
    if (r?.won) logDeath(deps, item, failureClass, 'permanent failure');
    return outcomeOf(r, 'dead');
  }
  if (error instanceof DeferError) {
    const delayMs = Math.max(0, error.runAt.getTime() - Date.now());
    let refused: ValidationError | undefined;
    const r = await finalizeSafely(deps, item, () => ledger.release(item, { delayMs, reason: error.reason }), (e) => (refused = e));
    // A reason the ledger refuses (too long, not well-formed) is the handler's mistake: the attempt fails with it.
    if (refused) return finalizeError(deps, item, refused, undefined);
    return delayed(deps, item, delayMs, outcomeOf(r, 'released'));
  }
  if (error instanceof BlockOnError) {
    let refused: ValidationError | undefined;
    const r = await finalizeSafely(
      deps,
      item,
      () =>
        ledger.block(item, {
          dependencyKey: error.dependencyKey,
          maxWaitMs: error.maxWaitMs,
          ...(error.probeAfterMs !== undefined ? { probeAfterMs: error.probeAfterMs } : {}),
        }),
      (e) => (refused = e),
    );
    // A dependency key or wait the ledger refuses is the handler's mistake: the attempt fails with it.
    if (refused) return finalizeError(deps, item, refused, undefined);
    // The key was woken while this attempt ran: pending again at once. A re-block after the wait expired: dead.
    if (r?.won && r.state === 'dead') logDeath(deps, item, 'dependency_expired', `dependency ${error.dependencyKey} not met before the wait expired`);
    return outcomeOf(r, r?.state === 'pending' ? 'released' : r?.state === 'dead' ? 'dead' : 'blocked');
  }
  const r = await finalizeSafely(deps, item, () => ledger.retry(item, { error, backoff: settings.backoff }));
  if (r?.won && r.state === 'dead') logDeath(deps, item, RETRY_CLASS, 'attempt budget spent');
  else if (r?.won) log.info({ id: item.id, type: item.type, attempt: item.attempt, class: RETRY_CLASS, delayMs: r.delayMs }, 'attempt failed: retry after the backoff');
  return delayed(deps, item, r?.delayMs ?? 0, outcomeOf(r, r?.state === 'dead' ? 'dead' : 'retried'));
}

/** The class ledger.retry records when given none. */
const RETRY_CLASS = 'error';

/** Every death is one warn line: enough to find the item (`lanewake inspect`), never its payload. */
function logDeath<DB>(deps: ExecutorDeps<DB>, item: ClaimedItem, failureClass: string, why: string): void {
  deps.log.warn({ id: item.id, type: item.type, attempt: item.attempt, class: failureClass }, `${why}: dead`);
}

/** Longest delay between releases of an item whose type has no handler here (unless unknownTypeReleaseMs is longer). */
const UNOWNED_RELEASE_CAP_MS = 60_000;

/**
 * No handler here for the item's type. During a rolling deploy a worker
 * that has one may be starting: release (no attempt spent) until the grace
 * from the item's creation is over, each release later as the item ages (a
 * quarter of its age, up to a minute) so an unowned item costs a few dozen
 * claims an hour, not hundreds; then dead, class `unowned`.
 */
async function finalizeUnowned<DB>(deps: ExecutorDeps<DB>, item: ClaimedItem): Promise<Outcome> {
  const { ledger, settings, log } = deps;
  const ageMs = Math.max(0, Date.now() - item.createdAt.getTime());
  const graceLeftMs = settings.unknownTypeGraceMs - ageMs;
  if (settings.unknownType === 'release' && graceLeftMs > 0) {
    const seen = deps.unownedTypesSeen;
    if (seen && !seen.has(item.type)) {
      seen.add(item.type);
      log.info({ type: item.type, graceMs: settings.unknownTypeGraceMs }, 'no handler here for this type: releasing its items for a worker that has one');
    }
    const delayMs = Math.min(graceLeftMs, Math.max(settings.unknownTypeReleaseMs, Math.min(Math.floor(ageMs / 4), UNOWNED_RELEASE_CAP_MS)));
    const r = await finalizeSafely(deps, item, () => ledger.release(item, { delayMs, reason: `no handler for type ${item.type} here` }));
    return delayed(deps, item, delayMs, outcomeOf(r, 'released'));
  }
  const error =
    settings.unknownType === 'release' ? `no handler for type ${item.type} within ${settings.unknownTypeGraceMs} ms of its creation` : `no handler for type ${item.type}`;
  const r = await finalizeSafely(deps, item, () => ledger.fail(item, { error, failureClass: 'unowned' }));
  if (r?.won) logDeath(deps, item, 'unowned', 'no handler for its type');
  return outcomeOf(r, 'dead');
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
  /** The ledger refused what the handler asked for: the caller ends the attempt another way (nothing was written). */
  onRefused?: (error: ValidationError) => void,
): Promise<R | undefined> {
  const deadline = Date.now() + deps.settings.finalizeTimeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      const r = await write();
      if (!r.won) deps.log.warn({ id: item.id, type: item.type }, 'finalize lost its CAS: the item had moved on');
      return r;
    } catch (error) {
      if (error instanceof ValidationError && onRefused) {
        onRefused(error);
        return undefined;
      }
      if (error instanceof ValidationError) {
        deps.log.error({ id: item.id, err: error.message }, 'finalize rejected as invalid; the lease will expire');
        return undefined;
      }
      const wait = leaseWriteRetryMs(attempt);
      if (Date.now() + wait > deadline) {
        deps.log.error({ id: item.id, err: (error as Error).message }, 'finalize failed; the lease will expire and the item be reclaimed');
        return undefined;
      }
      await sleep(wait, { keepAlive: true });
      // The lease keeper stopped when the handler settled: while the finalize is retried (the ledger
      // unreachable for a while), keep the lease, or it expires and the next holder spends an attempt.
      // Between two tries, so a renewal never races the finalize's own write.
      await deps.ledger.renew(item, deps.settings.leaseMs).catch(() => undefined);
    }
  }
}

function outcomeOf(r: FinalizeResult | undefined, ifWon: Outcome): Outcome {
  return r?.won ? ifWon : 'lease_lost';
}
