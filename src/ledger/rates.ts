import type { LedgerCore } from './core.js';
import { rateTakeSchema, rateWindowSchema } from './inputs.js';
import { pushRateWindow, reserveRateTurn, takeRate } from './sql/rates/rate-limits.js';
import type { LeaseHandle, RateAnswer } from './types.js';
import { queueName, validate } from './validation.js';

/**
 * Rate limits by key (docs/design/consumer.md, "Rate limits"): the windows a rate-limited item's start is taken from.
 */
export class LedgerRates {
  constructor(private readonly core: LedgerCore) {}

  /**
   * A rate-limited item's start: granted when its key's next start has come
   * (the item's started_at is then now), else how long until it may.
   */
  takeRate(
    handle: Pick<LeaseHandle, 'id' | 'queue' | 'leaseToken'>,
    input: { key: string; intervalMs: number },
  ): Promise<RateAnswer> {
    const v = validate(rateTakeSchema, input, 'takeRate');
    const take = {
      queue: handle.queue,
      key: v.key,
      id: handle.id,
      token: handle.leaseToken,
      intervalUs: Math.round(v.intervalMs * 1000),
    };
    const { db, tables } = this.core;
    return this.core.capabilities().then((caps) => takeRate(db, caps, tables, take));
  }

  /** A turn for an item refused a rate-limited start: how long from now (ms). */
  reserveRateTurn(input: { queue: string; key: string; intervalMs: number }): Promise<number> {
    const v = validate(rateTakeSchema, { key: input.key, intervalMs: input.intervalMs }, 'reserveRateTurn');
    validate(queueName, input.queue, 'reserveRateTurn', 'queue');
    const spec = { queue: input.queue, key: v.key, intervalUs: Math.round(v.intervalMs * 1000) };
    const { db, tables } = this.core;
    return this.core.capabilities().then((caps) => reserveRateTurn(db, caps, tables, spec));
  }

  /** A key's next start pushed to `afterMs` from now at the soonest (a handler's RateLimitedError). */
  pushRateWindow(input: { queue: string; key: string; afterMs: number }): Promise<void> {
    const v = validate(rateWindowSchema, input, 'pushRateWindow');
    return pushRateWindow(this.core.db, this.core.tables, v);
  }
}
