import { RATE_LIMITED_REASON } from '../ledger/types.js';

/** Thrown by a handler: the item can never succeed; it goes dead at once (class `permanent` unless given). */
export class PermanentError extends Error {
  override readonly name: string = 'PermanentError';
  constructor(
    message: string,
    readonly failureClass = 'permanent',
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * Thrown by a handler (or `ctx.skip(reason)`): nothing to do for this item — its filter does not
 * match, its source is inactive. The item ends `skipped` with `reason` (its result, its last error
 * and its history say it), no attempt is retried, and its lane passes on as after a completion.
 */
export class SkipError extends Error {
  override readonly name: string = 'SkipError';
  constructor(readonly reason: string = 'skipped') {
    super(`skipped: ${reason}`);
  }
}

/**
 * Thrown by a handler: not now — release the item without spending an
 * attempt, until `runAt`, or, without one, after the type's backoff (the
 * consumer's `backoff` policy) for the n-th release since its last spent
 * attempt (docs/design/handlers.md, Handler outcomes).
 */
export class DeferError extends Error {
  override readonly name: string = 'DeferError';
  constructor(
    readonly runAt?: Date,
    readonly reason = 'deferred',
  ) {
    super(runAt === undefined ? `${reason}: after the backoff` : `${reason} until ${runAt.toISOString()}`);
  }
}

/** A rate limit hit: a Defer by another name, so logs and metrics can tell them apart. */
export class RateLimitedError extends DeferError {
  override readonly name: string = 'RateLimitedError';
  /**
   * For a type with a `rateLimit`, its key's next start is pushed this far back, fleet-wide (docs/design/consumer.md,
   * "Rate
   * limits").
   */
  readonly retryAfterMs: number;
  constructor(retryAfterMs: number | { retryAfterMs: number }) {
    const ms = typeof retryAfterMs === 'number' ? retryAfterMs : retryAfterMs.retryAfterMs;
    super(new Date(Date.now() + ms), RATE_LIMITED_REASON);
    this.retryAfterMs = ms;
  }
}

/**
 * Thrown by a handler: wait for `dependencyKey` (the item and its lane park as
 * `blocked`) until `producer.wakeDependency(key)`, a probe, or `maxWaitMs`.
 */
export class BlockOnError extends Error {
  override readonly name: string = 'BlockOnError';
  constructor(
    readonly dependencyKey: string,
    readonly maxWaitMs: number,
    readonly probeAfterMs?: number,
  ) {
    super(`blocked on ${dependencyKey}`);
  }
}

/**
 * `Defer(runAt?, reason?)` or `new Defer(runAt?, reason?)`: a DeferError; without `runAt`, the engine's backoff says
 * when.
 */
export const Defer = function Defer(runAt?: Date, reason?: string): DeferError {
  return new DeferError(runAt, reason);
} as unknown as { (runAt?: Date, reason?: string): DeferError; new (runAt?: Date, reason?: string): DeferError };
export const BlockOn = (dependencyKey: string, opts: { maxWaitMs: number; probeAfterMs?: number }): BlockOnError =>
  new BlockOnError(dependencyKey, opts.maxWaitMs, opts.probeAfterMs);

/**
 * Why a handler's signal aborted (`JobAbortedError.reason`, as docs/design/handlers.md spells it).
 * The outcome of an item whose lease was lost is `leaseLost`, the consumer counter's name.
 */
export type AbortReason = 'lease_lost' | 'deadline' | 'cancelled' | 'shutdown';

/**
 * The reason of an aborted `ctx.signal` (`ctx.signal.reason`). A handler
 * that sees its signal abort throws it, `ctx.signal.throwIfAborted()`, and
 * the item ends by `reason`: cancelled; released without spending an attempt
 * (deadline, shutdown); nothing written when the lease was lost.
 */
export class JobAbortedError extends Error {
  override readonly name: string = 'JobAbortedError';
  constructor(readonly reason: AbortReason) {
    super(`aborted: ${reason.replace('_', ' ')}`);
  }
}
