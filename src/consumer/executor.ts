import type { Transaction } from 'kysely';
import { ValidationError } from '../errors.js';
import type { Logger } from '../log.js';
import type { FinalizeResult, Ledger } from '../ledger/ledger.js';
import { LeaseLostError } from '../ledger/sql/transition.js';
import type { ClaimedItem } from '../ledger/types.js';
import { retryOnConflict } from '../ledger/retry.js';
import type { BatchCompleter } from './completer.js';
import { BlockOnError, DeferError, PermanentError } from './errors.js';
import { LeaseKeeper, leaseTickMs } from './lease-keeper.js';
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
  /** Aborts the handler's signal (shutdown); the outcome then follows the abort rules. */
  abort(reason: AbortReason): void;
  /** Stop waiting for the handler: leave its lease to expire, write nothing. */
  abandon(): void;
  /** The consumer's clock: renews the lease when due, enforces a long deadline. */
  tick(nowMs: number): void;
  /** The handler has settled (or never ran): its executor slot is free, the finalize may still be writing. */
  settled: Promise<void>;
  /** The outcome is written (or given up on). */
  done: Promise<Outcome>;
}

export interface ExecutorDeps<DB> {
  ledger: Ledger;
  completer: BatchCompleter;
  settings: ConsumerSettings;
  handlers: ReadonlyMap<string, RegisteredHandler<DB>>;
  log: Logger;
  /** The item went back to pending with a future due time: arrange a wake-up for then. */
  onDelayed?: (item: ClaimedItem, delayMs: number) => void;
}

class Abandoned extends Error {}

/**
 * Deadlines shorter than this many ticks of the consumer's clock get a timer
 * of their own; longer ones (the 10 min default) are checked on the tick,
 * late by at most one tick (a second at most, 5% of the deadline at most).
 */
const CLOCK_DEADLINE_TICKS = 20;

/** Runs one claimed item through its handler and writes the outcome (DESIGN §4). */
export function runJob<DB>(deps: ExecutorDeps<DB>, item: ClaimedItem, claimedAtMs: number = Date.now()): RunningJob {
  const { ledger, settings, log } = deps;
  // Made on first use of ctx.signal: most handlers never look, and a signal per item is not free.
  let controller: AbortController | undefined;
  let abortReason: AbortReason | undefined;
  let handlerRunning = false;
  let graceTimer: NodeJS.Timeout | undefined;
  /** A deadline the clock enforces (long ones; short ones get a timer of their own). */
  let deadlineAtMs: number | undefined;
  let leaseLost = false;
  let completedInTx = false;
  let abandon: () => void = () => undefined;
  const abandoned = new Promise<never>((_, reject) => {
    abandon = () => reject(new Abandoned());
  });
  abandoned.catch(() => undefined);

  const abortError = (): Error => new Error(`aborted: ${(abortReason ?? 'shutdown').replace('_', ' ')}`);
  const signal = (): AbortSignal => {
    if (!controller) {
      controller = new AbortController();
      if (abortReason !== undefined) controller.abort(abortError());
    }
    return controller.signal;
  };
  const abort = (reason: AbortReason): void => {
    if (abortReason !== undefined) return;
    abortReason = reason;
    controller?.abort(abortError());
    // A handler that ignores its abort is not waited on forever: its lease is left to expire.
    if (handlerRunning && reason !== 'shutdown') graceTimer = setTimeout(() => abandon(), settings.abortGraceMs);
  };
  const keeper = new LeaseKeeper(ledger, item, settings.leaseMs, (event) => {
    if (event === 'lost') {
      leaseLost = true;
      abort('lease_lost');
    } else abort('cancelled');
  }, claimedAtMs);

  let markSettled: () => void = () => undefined;
  const settled = new Promise<void>((resolve) => {
    markSettled = resolve;
  });

  const done = (async (): Promise<Outcome> => {
    const def = deps.handlers.get(item.type);
    if (!def) {
      if (settings.unknownType === 'release') {
        return outcomeOf(await finalizeSafely(deps, item, () => ledger.release(item, { delayMs: settings.unknownTypeReleaseMs, reason: 'no handler here' })), 'released');
      }
      return outcomeOf(await finalizeSafely(deps, item, () => ledger.fail(item, { error: `no handler for type ${item.type}`, failureClass: 'unowned' })), 'dead');
    }
    let payload: unknown = item.payload;
    if (def.schema) {
      const parsed = def.schema.safeParse(item.payload);
      if (!parsed.success) {
        const error = `payload does not match the handler's schema: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(payload)'}: ${i.message}`).join('; ')}`;
        return outcomeOf(await finalizeSafely(deps, item, () => ledger.fail(item, { error, failureClass: 'invalid_payload' })), 'dead');
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
    const ctx: JobContext<DB> = {
      get signal() {
        return signal();
      },
      transaction: async <T>(fn: (trx: Transaction<DB>) => Promise<T>): Promise<T> => {
        if (completedInTx) throw new Error('ctx.transaction already completed this item');
        const value = await retryOnConflict(() =>
          ledger.db.transaction().execute(async (trx) => {
            const v = await fn(trx as unknown as Transaction<DB>);
            await ledger.completeInTransaction(trx, item, v === undefined ? undefined : v);
            return v;
          }),
        );
        completedInTx = true;
        return value;
      },
      checkpoint: (value) => ledger.checkpoint(item, value),
      heartbeat: () => keeper.renewNow(),
    };

    const deadlineMs = def.deadlineMs ?? settings.deadlineMs;
    // A long deadline (the default is 10 min) is checked on the clock's tick,
    // late by at most a tick: no timer per item. A short one gets its own timer.
    const onClock = deadlineMs >= CLOCK_DEADLINE_TICKS * leaseTickMs(settings.leaseMs);
    const deadline = deadlineMs > 0 && !onClock ? setTimeout(() => abort('deadline'), deadlineMs) : undefined;
    if (deadlineMs > 0 && onClock) deadlineAtMs = Date.now() + deadlineMs;
    handlerRunning = true;

    let returned: { value: unknown } | undefined;
    let thrown: unknown;
    try {
      returned = { value: await Promise.race([def.handle(job, ctx), abandoned]) };
    } catch (error) {
      thrown = error;
    } finally {
      handlerRunning = false;
      deadlineAtMs = undefined;
      if (deadline) clearTimeout(deadline);
      if (graceTimer) clearTimeout(graceTimer);
      markSettled();
      const renewal = keeper.stop();
      if (renewal) await renewal;
    }

    if (thrown instanceof Abandoned) {
      log.warn({ id: item.id, type: item.type, reason: abortReason }, 'handler did not settle after abort; its lease is left to expire');
      return 'abandoned';
    }
    if (completedInTx) return 'completed';
    if (leaseLost || thrown instanceof LeaseLostError) {
      log.warn({ id: item.id, type: item.type }, 'lease lost; this holder writes nothing');
      return 'lease_lost';
    }
    if (returned) {
      const r = await finalizeSafely(deps, item, () => deps.completer.complete(item, returned.value));
      return outcomeOf(r, r && r.state === 'dead' ? 'dead' : 'completed');
    }
    return finalizeError(deps, item, thrown, abortReason);
  })();

  void done.finally(markSettled);
  const tick = (nowMs: number): void => {
    keeper.tick(nowMs);
    if (deadlineAtMs !== undefined && nowMs >= deadlineAtMs) {
      deadlineAtMs = undefined;
      abort('deadline');
    }
  };
  return { item, abort, abandon: () => abandon(), tick, settled, done };
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
