import { collectDefaultMetrics, type Counter, type Gauge, Registry } from 'prom-client';
import type { Consumer } from '../consumer/consumer.js';
import type { Outcome } from '../consumer/job-run.js';
import type { Ledger } from '../ledger/ledger.js';
import type { ClaimedItem } from '../ledger/types.js';
import type { FleetGaugeLedger, FleetGaugeRefresh } from './fleet-gauges.js';
import { defineMetrics, type FoldedCounter, type ItemLabels, type LanewakeMetricSet } from './metric-definitions.js';

/**
 * prom-client's defaults that are gauges named `…_total`, which the exposition
 * conventions keep for counters (`promtool check metrics` flags them). Each is
 * the sum of its labelled sibling without the suffix: `sum without (type) (nodejs_active_handles)`.
 */
const DROPPED_DEFAULT_METRICS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
] as const;

export interface LanewakeMetricsOptions {
  /**
   * Node process metrics (CPU, memory, event loop lag, GC, handles) under their standard names (`process_*`,
   * `nodejs_*`). Default true.
   */
  defaultMetrics?: boolean;
}

const FOLDED_COUNTERS: readonly FoldedCounter[] = [
  'wakeEntriesRead',
  'handedOver',
  'stepsRecorded',
  'stepsResumed',
  'progressWrites',
];

/** What the scrape-time collectors read from one observed consumer. */
interface ObservedConsumer {
  queue: string;
  inFlight: () => number;
  redisConnected: () => boolean;
  paused: () => boolean;
  staleOnly: () => boolean;
  progressOfRunning: () => { type: string; percent: number }[];
  counters: () => Readonly<Record<FoldedCounter, number>>;
  /** Each folded counter as last folded into its series. */
  seen: Record<FoldedCounter, number>;
}

/**
 * The Prometheus metrics of one lanewake process (docs/design/supervisor.md), on a registry
 * of its own (never prom-client's global one), so several instances — and
 * the host application's own metrics — never collide.
 *
 * Event-driven series (claims, outcomes, latencies, handler run time) come
 * from the consumers passed to `observeConsumer`; gauges of process state
 * (in-flight, Redis, pause heard) are read from those consumers at scrape
 * time; the ledger-wide gauges (fleet-gauges.ts) are refreshed by the
 * reconciler through `refreshFleetGauges`, and exported by one process of
 * the fleet at a time.
 */
export class LanewakeMetrics {
  readonly registry: Registry;

  private readonly observed = new Set<ObservedConsumer>();

  private readonly m: LanewakeMetricSet;
  private ledger: Pick<Ledger, 'pool'> | undefined;

  constructor(options: LanewakeMetricsOptions = {}) {
    const registry = new Registry();
    this.registry = registry;
    this.m = defineMetrics(registry, {
      foldCounters: () => this.foldConsumerCounters(),
      progress: (gauge) => this.collectProgress(gauge),
      inFlight: (gauge) =>
        this.setPerQueue(
          gauge,
          (c) => c.inFlight(),
          (a, b) => a + b,
        ),
      paused: (gauge) => this.setPerQueue(gauge, (c) => (c.paused() ? 1 : 0), Math.max),
      staleOnly: (gauge) => this.setPerQueue(gauge, (c) => (c.staleOnly() ? 1 : 0), Math.max),
      redisConnected: (gauge) => {
        const all = [...this.observed];
        gauge.set(all.length > 0 && all.every((c) => c.redisConnected()) ? 1 : 0);
      },
      dbPool: (gauge) => {
        gauge.reset();
        if (!this.ledger?.pool) return;
        const p = this.ledger.pool;
        gauge.set({ state: 'open' }, p.total);
        gauge.set({ state: 'in_use' }, p.inUse);
        gauge.set({ state: 'waiting' }, p.waiting);
      },
    });

    if (options.defaultMetrics ?? true) {
      // Standard names, so stock Node.js dashboards work; the registry is this instance's, so two in
      // one process do not collide.
      collectDefaultMetrics({ register: registry });
      for (const name of DROPPED_DEFAULT_METRICS) registry.removeSingleMetric(name);
    }
  }

  /**
   * Subscribes to a consumer's events; its in-flight count and Redis state
   * are read at each scrape. Returns the unsubscribe function (idempotent).
   */
  observeConsumer<DB>(consumer: Consumer<DB>): () => void {
    const queue = consumer.settings.queue;
    const entry: ObservedConsumer = {
      queue,
      inFlight: () => consumer.inFlight,
      redisConnected: () => consumer.redisConnected,
      paused: () => consumer.paused,
      staleOnly: () => consumer.staleOnly !== undefined,
      progressOfRunning: () => consumer.progressOfRunning,
      counters: () => consumer.counters,
      // Count only what happens from now on, so observing a running consumer adds no burst.
      seen: Object.fromEntries(FOLDED_COUNTERS.map((k) => [k, consumer.counters[k]])) as Record<FoldedCounter, number>,
    };
    // Queue-level series exist from the start (at 0), so rate() has a baseline.
    for (const k of FOLDED_COUNTERS) this.m.folded[k].inc({ queue }, 0);
    this.m.claimDuration.zero({ queue });

    const onStarted = (item: ClaimedItem): void => {
      const labels = { queue: item.queue, type: item.type };
      this.m.claimed.inc(labels);
      if (item.group !== undefined) this.m.coalesced.inc(labels, item.group.ids.length);
      // created_at is on the ledger's clock; a clock behind ours must not give a negative latency.
      this.m.enqueueToStart.observe(labels, Math.max(0, Date.now() - item.createdAt.getTime()) / 1000);
      // Both on the ledger's clock. A claim of an item not yet due is impossible, but a handover's
      // start may tie its due time.
      if (item.startedAt !== null)
        this.m.queueLag.observe(labels, Math.max(0, item.startedAt.getTime() - item.runAfter.getTime()) / 1000);
    };
    const onOutcome = (item: ClaimedItem, outcome: Outcome, handlerMs: number | undefined): void => {
      const labels = { queue: item.queue, type: item.type };
      this.outcomeCounter(outcome)?.inc(labels);
      if (handlerMs !== undefined) this.m.handlerDuration.observe(labels, handlerMs / 1000);
    };
    const onStage = (item: ClaimedItem, stage: string, ms: number): void => {
      this.m.stageDuration.observe({ queue: item.queue, type: item.type, stage }, Math.max(0, ms) / 1000);
    };
    const onClaimRound = (round: { claimed: number; durationMs: number }): void => {
      this.m.claimDuration.observe({ queue }, Math.max(0, round.durationMs) / 1000);
    };

    consumer.on('started', onStarted);
    consumer.on('outcome', onOutcome);
    consumer.on('stage', onStage);
    consumer.on('claimRound', onClaimRound);
    this.observed.add(entry);

    let subscribed = true;
    return () => {
      if (!subscribed) return;
      subscribed = false;
      consumer.off('started', onStarted);
      consumer.off('outcome', onOutcome);
      consumer.off('stage', onStage);
      consumer.off('claimRound', onClaimRound);
      this.foldConsumerCounters();
      this.observed.delete(entry);
    };
  }

  /** Reports this ledger's pool in `lanewake_db_pool_connections` at each scrape. */
  observeLedger(ledger: Pick<Ledger, 'pool'>): void {
    this.ledger = ledger;
  }

  /**
   * Takes or keeps the fleet-wide gauges' lease and, holding it, sets them
   * from the fleet's last count (counted here when older than `everyMs`);
   * otherwise this process exports none of them. Queues the ledger no longer
   * holds disappear from the series. Returns whether this process exports
   * them. Throws what the ledger throws (the gauges stay until the lease
   * runs out here).
   */
  refreshFleetGauges(ledger: FleetGaugeLedger, opts: FleetGaugeRefresh): Promise<boolean> {
    return this.m.fleet.refresh(ledger, opts);
  }

  /** Stops exporting the fleet-wide gauges and gives their lease up (a stopping worker, before its ledger closes). */
  releaseFleetGauges(ledger: FleetGaugeLedger): Promise<void> {
    return this.m.fleet.release(ledger);
  }

  /** This process exports the fleet-wide gauges now. */
  get exportsFleetGauges(): boolean {
    return this.m.fleet.holding;
  }

  /** The Prometheus text exposition of every metric. */
  metrics(): Promise<string> {
    return this.registry.metrics();
  }

  /** The content type of `metrics()`. */
  get contentType(): string {
    return this.registry.contentType;
  }

  private outcomeCounter(outcome: Outcome): Counter<ItemLabels> | undefined {
    switch (outcome) {
      case 'completed':
        return this.m.completed;
      case 'retried':
        return this.m.retried;
      case 'dead':
        return this.m.dead;
      case 'released':
        return this.m.released;
      case 'skipped':
        return this.m.skipped;
      case 'leaseLost':
        return this.m.leaseLost;
      default:
        return undefined;
    }
  }

  /** The mean reported progress of the running items, per queue and type. */
  private collectProgress(gauge: Gauge<ItemLabels>): void {
    const sums = new Map<string, { queue: string; type: string; sum: number; n: number }>();
    for (const c of this.observed) {
      for (const p of c.progressOfRunning()) {
        const key = `${c.queue}\u0000${p.type}`;
        const s = sums.get(key) ?? { queue: c.queue, type: p.type, sum: 0, n: 0 };
        s.sum += p.percent;
        s.n += 1;
        sums.set(key, s);
      }
    }
    gauge.reset();
    for (const s of sums.values()) gauge.set({ queue: s.queue, type: s.type }, s.sum / s.n);
  }

  /** A per-queue gauge set from the observed consumers: each one's `value`, combined per queue. */
  private setPerQueue(
    gauge: Gauge<'queue'>,
    value: (c: ObservedConsumer) => number,
    combine: (a: number, b: number) => number,
  ): void {
    const byQueue = new Map<string, number>();
    for (const c of this.observed) {
      const prev = byQueue.get(c.queue);
      byQueue.set(c.queue, prev === undefined ? value(c) : combine(prev, value(c)));
    }
    gauge.reset();
    for (const [queue, n] of byQueue) gauge.set({ queue }, n);
  }

  /** Adds what each observed consumer counted since the last fold (consumer counters are cumulative). */
  private foldConsumerCounters(): void {
    for (const c of this.observed) {
      const now = c.counters();
      for (const k of FOLDED_COUNTERS) {
        if (now[k] > c.seen[k]) this.m.folded[k].inc({ queue: c.queue }, now[k] - c.seen[k]);
        c.seen[k] = now[k];
      }
    }
  }
}
