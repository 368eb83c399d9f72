import { LeaseLostError, OwnershipLostError, ResultNotStorableError, ValidationError } from '../errors.js';
import type { Logger } from '../log.js';
import { sleep } from '../sleep.js';
import type { FinalizeResult } from '../ledger/ledger.js';
import { RATE_LIMITED_REASON, type ClaimedItem } from '../ledger/types.js';
import type { BatchCompleter } from './completer.js';
import { BlockOnError, DeferError, PermanentError, SkipError, type AbortReason } from './errors.js';
import { leaseWriteRetryMs } from './lease-keeper.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { ConsumerSettings } from './options.js';

/** How one run ended; each is also the name of the consumer counter it adds to. */
export type Outcome =
  | 'completed'
  | 'retried'
  | 'dead'
  | 'released'
  | 'blocked'
  | 'cancelled'
  | 'skipped'
  /** The lease was lost (or the finish lost its CAS): nothing was written by this holder. */
  | 'leaseLost'
  /** The handler did not settle after being aborted: its lease is left to expire. */
  | 'abandoned';

/** What writing an outcome needs of the consumer. */
export interface OutcomeDeps {
  ledger: ConsumerLedger;
  completer: BatchCompleter;
  settings: ConsumerSettings;
  log: Logger;
  /** The item went back to pending with a future due time: arrange a wake-up for then. */
  onDelayed?: (item: ClaimedItem, delayMs: number) => void;
  /** Types this consumer has already said it has no handler for (said once per type). */
  unownedTypesSeen?: Set<string>;
}

/**
 * How a handler settled, read once any renewal in flight has ended too
 * (a renewal may abort the signal, or find the lease lost, after the handler settled).
 */
export interface Settlement {
  item: ClaimedItem;
  /** The handler's value when it returned; undefined when it threw or was abandoned. */
  returned: { value: unknown } | undefined;
  thrown: unknown;
  /** The run stopped waiting for a handler that ignored its abort. */
  abandoned: boolean;
  /** Why the signal had aborted when the handler settled. */
  abortedWith: AbortReason | undefined;
  /** Why the signal has aborted by now. */
  abortReason: AbortReason | undefined;
  /** ctx.transaction committed the completion with the handler's writes. */
  completedInTx: boolean;
  leaseLost: boolean;
  /** Set by `writeOutcome` on a completion: false when the lane has nothing left waiting. */
  laneAdvanced?: boolean | undefined;
  /** Set by `writeOutcome` on a keyed completion: false when its key left no admitted item for a claim. */
  keyAdmitted?: boolean | undefined;
}

/**
 * Maps how the handler settled to the item's outcome, and writes it (docs/design/handlers.md, Handler outcomes and
 * Aborts).
 */
export async function writeOutcome(deps: OutcomeDeps, s: Settlement): Promise<Outcome> {
  const { item } = s;
  const { log } = deps;
  if (s.abandoned) {
    log.warn(
      { id: item.id, type: item.type, reason: s.abortReason },
      'handler did not settle after abort; its lease is left to expire',
    );
    return 'abandoned';
  }
  if (s.completedInTx) return 'completed';
  let returned = s.returned;
  if (returned && s.abortedWith !== undefined) {
    // It may have skipped its work or finished it; the engine cannot tell. Skipped work recorded
    // as completed would be lost for good, while finished work run again is the duplicate
    // at-least-once delivery already allows: so the item ends by the abort reason.
    log.warn(
      { id: item.id, type: item.type, attempt: item.attempt, reason: s.abortedWith },
      'handler returned after its signal aborted: the item ends by the abort reason, not completed (throw ' +
        'ctx.signal.reason: ctx.signal.throwIfAborted())',
    );
    returned = undefined;
  }
  if (!s.leaseLost && s.thrown instanceof OwnershipLostError)
    return outcomeOf(await returnToNewOwner(deps, item, s.thrown), 'released');
  if (s.leaseLost || s.thrown instanceof LeaseLostError) {
    log.warn({ id: item.id, type: item.type }, 'lease lost; this holder writes nothing');
    return 'leaseLost';
  }
  if (returned) {
    const value = returned.value;
    const r = await finishSafely(deps, item, () => deps.completer.complete(item, value));
    s.laneAdvanced = r?.laneAdvanced;
    s.keyAdmitted = r?.keyAdmitted;
    if (r?.won && r.state === 'dead') logDeath(deps, item, r.failureClass, 'the handler result cannot be stored');
    return outcomeOf(r, r && r.state === 'dead' ? 'dead' : 'completed');
  }
  return writeThrown(deps, item, s.thrown, s.abortedWith ?? s.abortReason);
}

/** The handler threw `error` (or returned after an abort, `abortReason` set): cancel, release, fail, block or retry. */
async function writeThrown(
  deps: OutcomeDeps,
  item: ClaimedItem,
  error: unknown,
  abortReason: AbortReason | undefined,
): Promise<Outcome> {
  const { ledger, settings, log } = deps;
  if (abortReason === 'cancelled') {
    return outcomeOf(await finishSafely(deps, item, () => ledger.cancelClaimed(item)), 'cancelled');
  }
  if (abortReason === 'deadline') {
    log.warn(
      { id: item.id, type: item.type, attempt: item.attempt },
      'deadline passed; released without spending an attempt',
    );
    return delayed(
      deps,
      item,
      settings.deadlineBackoffMs,
      outcomeOf(
        await finishSafely(deps, item, () =>
          ledger.release(item, { delayMs: settings.deadlineBackoffMs, reason: 'deadline' }),
        ),
        'released',
      ),
    );
  }
  if (abortReason === 'shutdown') {
    return outcomeOf(await finishSafely(deps, item, () => ledger.release(item, { reason: 'shutdown' })), 'released');
  }
  if (error instanceof SkipError) {
    let refused: ValidationError | undefined;
    const r = await finishSafely(
      deps,
      item,
      () => ledger.skip(item, error.reason),
      (e) => (refused = e),
    );
    // A reason the ledger refuses (over the result cap) is the handler's mistake: the attempt fails with it.
    if (refused) return writeThrown(deps, item, refused, undefined);
    return outcomeOf(r, 'skipped');
  }
  // Dead at once: the handler says it can never succeed, or ctx.transaction could not store its result (its writes
  // rolled back; a retry would return the same).
  if (error instanceof PermanentError || error instanceof ResultNotStorableError) {
    const unstorable = error instanceof ResultNotStorableError;
    const failureClass =
      unstorable || /^[a-z0-9_.:-]{1,64}$/.test(error.failureClass) ? error.failureClass : 'permanent';
    const r = await finishSafely(deps, item, () => ledger.fail(item, { error, failureClass }));
    if (r?.won) logDeath(deps, item, r.failureClass, unstorable ? 'result not storable' : 'permanent failure');
    return outcomeOf(r, 'dead');
  }
  if (error instanceof DeferError) {
    // Without a time, the ledger backs off by the item's releases since its last spent attempt.
    const when =
      error.runAt === undefined
        ? { backoff: settings.backoff }
        : { delayMs: Math.max(0, error.runAt.getTime() - Date.now()) };
    let refused: ValidationError | undefined;
    const r = await finishSafely(
      deps,
      item,
      () => ledger.release(item, { ...when, reason: error.reason }),
      (e) => (refused = e),
    );
    // A reason the ledger refuses (too long, not well-formed) is the handler's mistake: the attempt fails with it.
    if (refused) return writeThrown(deps, item, refused, undefined);
    return delayed(deps, item, r?.delayMs ?? 0, outcomeOf(r, 'released'));
  }
  if (error instanceof BlockOnError) {
    let refused: ValidationError | undefined;
    const r = await finishSafely(
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
    if (refused) return writeThrown(deps, item, refused, undefined);
    // The key was woken while this attempt ran: pending again at once. A re-block after the wait expired: dead.
    if (r?.won && r.state === 'dead')
      logDeath(deps, item, r.failureClass, `dependency ${error.dependencyKey} not met before the wait expired`);
    return outcomeOf(r, r?.state === 'pending' ? 'released' : r?.state === 'dead' ? 'dead' : 'blocked');
  }
  const r = await finishSafely(deps, item, () => ledger.retry(item, { error, backoff: settings.backoff }));
  if (r?.won && r.state === 'dead') logDeath(deps, item, r.failureClass, 'attempt budget spent');
  else if (r?.won)
    log.info(
      { id: item.id, type: item.type, attempt: item.attempt, class: r.failureClass, delayMs: r.delayMs },
      'attempt failed: retry after the backoff',
    );
  return delayed(deps, item, r?.delayMs ?? 0, outcomeOf(r, r?.state === 'dead' ? 'dead' : 'retried'));
}

/** The payload failed the handler's schema (a pre-check: the handler never ran): dead, class `invalid_payload`. */
export async function writeInvalidPayload(deps: OutcomeDeps, item: ClaimedItem, issues: string): Promise<Outcome> {
  const error = `payload does not match the handler's schema: ${issues}`;
  const r = await finishSafely(deps, item, () => deps.ledger.fail(item, { error, failureClass: 'invalid_payload' }));
  if (r?.won) logDeath(deps, item, r.failureClass, "payload does not match the handler's schema");
  return outcomeOf(r, 'dead');
}

/** Longest delay between releases of an item whose type has no handler here (unless unknownTypeReleaseMs is longer). */
const UNOWNED_RELEASE_CAP_MS = 60_000;

/**
 * No handler here for the item's type (a pre-check). During a rolling deploy a worker
 * that has one may be starting: release (no attempt spent) until the grace
 * from the item's creation is over, each release later as the item ages (a
 * quarter of its age, up to a minute) so an unowned item costs a few dozen
 * claims an hour, not hundreds; then dead, class `unowned`.
 */
export async function writeUnowned(deps: OutcomeDeps, item: ClaimedItem): Promise<Outcome> {
  const { ledger, settings, log } = deps;
  const ageMs = Math.max(0, Date.now() - item.createdAt.getTime());
  const graceLeftMs = settings.unknownTypeGraceMs - ageMs;
  if (settings.unknownType === 'release' && graceLeftMs > 0) {
    const seen = deps.unownedTypesSeen;
    if (seen && !seen.has(item.type)) {
      seen.add(item.type);
      log.info(
        { type: item.type, graceMs: settings.unknownTypeGraceMs },
        'no handler here for this type: releasing its items for a worker that has one',
      );
    }
    const delayMs = Math.min(
      graceLeftMs,
      Math.max(settings.unknownTypeReleaseMs, Math.min(Math.floor(ageMs / 4), UNOWNED_RELEASE_CAP_MS)),
    );
    const r = await finishSafely(deps, item, () =>
      ledger.release(item, { delayMs, reason: `no handler for type ${item.type} here` }),
    );
    return delayed(deps, item, delayMs, outcomeOf(r, 'released'));
  }
  const error =
    settings.unknownType === 'release'
      ? `no handler for type ${item.type} within ${settings.unknownTypeGraceMs} ms of its creation`
      : `no handler for type ${item.type}`;
  const r = await finishSafely(deps, item, () => ledger.fail(item, { error, failureClass: 'unowned' }));
  if (r?.won) logDeath(deps, item, r.failureClass, 'no handler for its type');
  return outcomeOf(r, 'dead');
}

/**
 * A rate-limited start refused (rate-gate.ts): back to pending until its key's turn, no attempt spent; or nothing, when
 * the lease was lost.
 */
export async function writeRateLimited(
  deps: OutcomeDeps,
  item: ClaimedItem,
  waitMs: number | 'leaseLost',
): Promise<Outcome> {
  if (waitMs === 'leaseLost') return 'leaseLost';
  const delayMs = Math.ceil(waitMs);
  return delayed(
    deps,
    item,
    delayMs,
    outcomeOf(
      await finishSafely(deps, item, () => deps.ledger.release(item, { delayMs, reason: RATE_LIMITED_REASON })),
      'released',
    ),
  );
}

/** Every death is one warn line: enough to find the item (`lanewake inspect`), never its payload. */
function logDeath(deps: OutcomeDeps, item: ClaimedItem, failureClass: string | undefined, why: string): void {
  deps.log.warn({ id: item.id, type: item.type, attempt: item.attempt, class: failureClass }, `${why}: dead`);
}

function delayed(deps: OutcomeDeps, item: ClaimedItem, delayMs: number, outcome: Outcome): Outcome {
  if ((outcome === 'retried' || outcome === 'released') && delayMs > 0) deps.onDelayed?.(item, delayMs);
  return outcome;
}

/**
 * Finalization runs on its own clock, not the handler's signal, so shutdown
 * cannot strand an item whose side effects already happened. A transient
 * failure is retried within the timeout: the CAS makes a repeat harmless (it
 * can only lose). A lost CAS is never retried.
 */
async function finishSafely<R extends FinalizeResult>(
  deps: OutcomeDeps,
  item: ClaimedItem,
  write: () => Promise<R>,
  /** The ledger refused what the handler asked for: the caller ends the attempt another way (nothing was written). */
  onRefused?: (error: ValidationError) => void,
): Promise<R | undefined> {
  const deadline = Date.now() + deps.settings.finalizeTimeoutMs;
  for (let attempt = 0; ; attempt++) {
    try {
      const r = await write();
      if (r.ownershipLost === true) return { ...r, ...(await returnToNewOwner(deps, item, r)) };
      if (!r.won) deps.log.warn({ id: item.id, type: item.type }, 'finalize lost its CAS: the item had moved on');
      return r;
    } catch (error) {
      // Nothing of this finish was written; a fenced write's R is only ever read through won and ownershipLost then.
      if (error instanceof OwnershipLostError) return (await returnToNewOwner(deps, item, error)) as R;
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
        deps.log.error(
          { id: item.id, err: (error as Error).message },
          'finalize failed; the lease will expire and the item be reclaimed',
        );
        return undefined;
      }
      await sleep(wait, { keepAlive: true });
      // The lease keeper stopped when the handler settled: while the finish is retried (the ledger
      // unreachable for a while), keep the lease, or it expires and the next holder spends an attempt.
      // Between two tries, so a renewal never races the finish's own write.
      await deps.ledger.renew(item, deps.settings.leaseMs).catch(() => undefined);
    }
  }
}

function outcomeOf(r: FinalizeResult | undefined, ifWon: Outcome): Outcome {
  if (r?.ownershipLost === true) return 'released';
  return r?.won ? ifWon : 'leaseLost';
}

/**
 * The queue was activated for another ownership epoch while this holder ran
 * the item, and a write of its work was refused (nothing of it committed).
 * The item goes back to pending, its attempt unspent, for the new owner's
 * claims: a release is not fenced by the epoch, only by the lease token.
 */
async function returnToNewOwner(
  deps: OutcomeDeps,
  item: ClaimedItem,
  lost: OwnershipLostError | FinalizeResult,
): Promise<FinalizeResult> {
  const now = lost instanceof OwnershipLostError ? lost.currentEpoch : undefined;
  deps.log.warn(
    {
      id: item.id,
      type: item.type,
      queue: item.queue,
      epoch: item.epoch,
      ...(now !== undefined ? { currentEpoch: now } : {}),
    },
    'ownership of the queue moved to another epoch: nothing of this attempt was written; the item goes back, attempt ' +
      'unspent, to the new owner',
  );
  await finishSafely(deps, item, () => deps.ledger.release(item, { reason: 'ownership lost' }));
  return { won: false, state: 'pending', ownershipLost: true };
}
