import type { LedgerCore } from './core.js';
import { fleetGauges, fleetStats, releaseFleetGauges, type FleetGaugeReading, type FleetStats } from './fleet-stats.js';
import { activateSchema } from './inputs.js';
import { beat, forget, liveConsumers, type ConsumerRow } from './sql/fleet/consumers.js';
import { activateOwnership, getOwnership } from './sql/fleet/ownership.js';
import { countProcessing } from './sql/operator/stats.js';
import type { LiveConsumer, Ownership } from './types.js';
import { queueName, validate } from './validation.js';

/**
 * The fleet's bookkeeping about itself: the consumer registry (heartbeats),
 * queue ownership (deployment epochs), and the fleet-wide stats and gauges.
 * None of it is one work item's life.
 */
export class LedgerFleet {
  constructor(private readonly core: LedgerCore) {}

  /** The consumers whose heartbeat is recent, of one queue or all. */
  liveConsumers(queue?: string): Promise<LiveConsumer[]> {
    if (queue !== undefined) validate(queueName, queue, 'liveConsumers', 'queue');
    return liveConsumers(this.core.db, this.core.tables, queue);
  }

  /** The heartbeat of a process's running consumers, one statement for all (src/consumer/registration.ts). */
  consumerBeat(rows: readonly ConsumerRow[], first: boolean): Promise<void> {
    return beat(this.core.db, this.core.tables, rows, first);
  }

  /** A stopped consumer's row removed. */
  consumerGone(name: string): Promise<void> {
    return forget(this.core.db, this.core.tables, name);
  }

  activate(opts: { queue: string; deployment: string; expectEpoch?: number }): Promise<Ownership> {
    const v = validate(activateSchema, opts, 'activate');
    return activateOwnership(this.core.db, this.core.tables, v);
  }

  ownership(queue: string): Promise<Ownership | undefined> {
    validate(queueName, queue, 'ownership', 'queue');
    return getOwnership(this.core.db, this.core.tables, queue);
  }

  /** The stats as the fleet last counted them, counted here if older than `everyMs` and this replica takes the task. */
  fleetStats(opts: { everyMs: number; leaseMs?: number }): Promise<FleetStats> {
    return fleetStats(this.core.db, this.core.tables, { everyMs: opts.everyMs, leaseMs: opts.leaseMs ?? 60_000 });
  }

  /**
   * The fleet-wide gauges if `holder` holds (takes or keeps) their lease for
   * `leaseMs`; undefined when another replica holds it (src/ledger/fleet-stats.ts).
   */
  fleetGauges(opts: { holder: string; everyMs: number; leaseMs: number }): Promise<FleetGaugeReading | undefined> {
    return fleetGauges(this.core.db, this.core.tables, { ...opts, countLeaseMs: 60_000 });
  }

  /** Gives up `holder`'s lease on the fleet-wide gauges. */
  releaseFleetGauges(holder: string): Promise<void> {
    return releaseFleetGauges(this.core.db, this.core.tables, holder);
  }

  /** How many items of `queue` are `processing` across the fleet (the claim limiter reads it). */
  countProcessing(queue: string): Promise<number> {
    validate(queueName, queue, 'countProcessing', 'queue');
    return countProcessing(this.core.db, this.core.tables, queue);
  }
}
