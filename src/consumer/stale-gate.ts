import type { PoolStats } from '../ledger/connection.js';

/**
 * Why a consumer claims only rescued work now (docs/design/consumer.md,
 * "Stale-only claims"): its queue is set so in the ledger (`queue`), its own
 * option says so (`consumer`), or its automatic gate tripped: the ledger's
 * pool has requests waiting for a connection (`pool`), or its claim
 * statements take too long (`slow`).
 */
export type StaleOnlyReason = 'queue' | 'consumer' | 'pool' | 'slow';

export interface StaleGateOptions {
  /** The consumer's `staleOnly` option. */
  always: boolean;
  /** Trip while at least this many requests wait for a connection of the ledger's pool. */
  poolWaiting?: number | undefined;
  /** Trip while the last claim statement took at least this long (ms). */
  claimMs?: number | undefined;
}

/**
 * The claim limiter's "only rescue stale work" answer: asked before every
 * claim round. A stale-only round still claims, so its own timing clears
 * the `slow` gate once the ledger answers quickly again.
 */
export class StaleGate {
  private queueOn = false;
  private lastClaimMs = 0;

  constructor(
    private readonly options: StaleGateOptions,
    private readonly pool: () => Readonly<PoolStats> | undefined,
  ) {}

  /** The gate of a consumer with these settings (`staleOnly`, `staleOnlyGate`). */
  static of(
    s: { staleOnly: boolean; staleOnlyGate?: { poolWaiting?: number; claimMs?: number } | undefined },
    pool: () => Readonly<PoolStats> | undefined,
  ): StaleGate {
    const gate = s.staleOnlyGate;
    return new StaleGate({ always: s.staleOnly, poolWaiting: gate?.poolWaiting, claimMs: gate?.claimMs }, pool);
  }

  /** The queue's stale-only flag, as the consumer last read it from the ledger. */
  setQueue(on: boolean): void {
    this.queueOn = on;
  }

  get queue(): boolean {
    return this.queueOn;
  }

  /** How long a claim statement took. */
  noteClaimMs(ms: number): void {
    this.lastClaimMs = ms;
  }

  /** Why the next claim round is stale-only, or undefined: it claims as usual. */
  reason(): StaleOnlyReason | undefined {
    const o = this.options;
    const waiting = this.pool()?.waiting ?? 0;
    return this.queueOn
      ? 'queue'
      : o.always
        ? 'consumer'
        : o.poolWaiting !== undefined && waiting >= o.poolWaiting
          ? 'pool'
          : o.claimMs !== undefined && this.lastClaimMs >= o.claimMs
            ? 'slow'
            : undefined;
  }
}
