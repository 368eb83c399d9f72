import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Consumer } from '../consumer/consumer.js';
import type { Outcome } from '../consumer/job-run.js';
import type { Ledger } from '../ledger/ledger.js';
import type { ClaimedItem } from '../ledger/types.js';
import { FleetGauges, type FleetGaugeLedger, type FleetGaugeRefresh } from './fleet-gauges.js';

/** Ledger round-trip buckets in seconds, 0.5 ms … 30 s (anything slower lands in +Inf). */
export const LATENCY_BUCKETS_SECONDS: readonly number[] = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
];

/** Waiting-time buckets in seconds (enqueue→start, queue lag), 0.5 ms … 5 min: a backlog is seen past 30 s. */
export const WAIT_BUCKETS_SECONDS: readonly number[] = [...LATENCY_BUCKETS_SECONDS, 60, 120, 300];

/** Handler run-time buckets in seconds, 1 ms … 1 h. */
export const HANDLER_BUCKETS_SECONDS: readonly number[] = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
];

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

/** The consumer counters folded into a Prometheus counter at each scrape. */
type FoldedCounter = 'wakeEntriesRead' | 'handedOver' | 'stepsRecorded' | 'stepsResumed' | 'progressWrites';
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

type ItemLabels = 'queue' | 'type';

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

  private readonly claimed: Counter<ItemLabels>;
  private readonly completed: Counter<ItemLabels>;
  private readonly retried: Counter<ItemLabels>;
  private readonly dead: Counter<ItemLabels>;
  private readonly released: Counter<ItemLabels>;
  private readonly skipped: Counter<ItemLabels>;
  private readonly leaseLost: Counter<ItemLabels>;
  private readonly coalesced: Counter<ItemLabels>;
  private readonly folded: Record<FoldedCounter, Counter<'queue'>>;
  private readonly progress: Gauge<ItemLabels>;
  private readonly enqueueToStart: Histogram<ItemLabels>;
  private readonly queueLag: Histogram<ItemLabels>;
  private readonly handlerDuration: Histogram<ItemLabels>;
  private readonly stageDuration: Histogram<ItemLabels | 'stage'>;
  private readonly claimDuration: Histogram<'queue'>;
  private readonly fleet: FleetGauges;
  private readonly inFlight: Gauge<'queue'>;
  private readonly redisConnected: Gauge;
  private readonly paused: Gauge<'queue'>;
  private readonly staleOnly: Gauge<'queue'>;
  private readonly dbPool: Gauge<'state'>;
  private ledger: Pick<Ledger, 'pool'> | undefined;

  constructor(options: LanewakeMetricsOptions = {}) {
    const registry = new Registry();
    this.registry = registry;
    const registers = [registry];
    const itemCounter = (name: string, help: string): Counter<ItemLabels> =>
      new Counter({ name, help, labelNames: ['queue', 'type'] as const, registers });

    this.claimed = itemCounter(
      'lanewake_items_claimed_total',
      'Items claimed by this process (one per handler start).',
    );
    this.completed = itemCounter('lanewake_items_completed_total', 'Items this process finalized as completed.');
    this.retried = itemCounter('lanewake_items_retried_total', 'Failed attempts this process scheduled for a retry.');
    this.dead = itemCounter(
      'lanewake_items_dead_total',
      'Items this process finalized as dead (permanent error, budget spent, invalid payload, unowned type).',
    );
    this.released = itemCounter(
      'lanewake_items_released_total',
      'Items this process released without spending an attempt (defer, deadline, shutdown).',
    );
    this.skipped = itemCounter(
      'lanewake_items_skipped_total',
      'Items this process finalized as skipped (the handler threw SkipError or called ctx.skip: nothing to do).',
    );
    this.leaseLost = itemCounter(
      'lanewake_lease_lost_total',
      'Attempts whose lease was lost before their outcome could be written.',
    );
    this.coalesced = itemCounter(
      'lanewake_items_coalesced_total',
      'Items that ran in a coalesced group behind its head, in one ' +
        'handler call with it (the heads are counted as claimed).',
    );

    // Read from the consumers' counters at each scrape (both fold all of them: either may be collected first).
    const foldedCounter = (name: string, help: string): Counter<'queue'> =>
      new Counter({
        name,
        help,
        labelNames: ['queue'] as const,
        registers,
        collect: () => this.foldConsumerCounters(),
      });
    this.folded = {
      wakeEntriesRead: foldedCounter(
        'lanewake_wake_entries_read_total',
        'Wake-up stream entries read by this process.',
      ),
      handedOver: foldedCounter(
        'lanewake_items_handed_over_total',
        "Items producers inserted claimed under this process's offers and " +
          'handed over (started with no claim round trip; docs/design.md §6).',
      ),
      stepsRecorded: foldedCounter(
        'lanewake_steps_recorded_total',
        'Durable steps (ctx.step) this process ran and recorded.',
      ),
      stepsResumed: foldedCounter(
        'lanewake_steps_resumed_total',
        'Durable steps found done by an earlier attempt, whose result was returned without running them again.',
      ),
      progressWrites: foldedCounter(
        'lanewake_progress_writes_total',
        'ctx.progress reports this process wrote to the ledger (at most one per item per second).',
      ),
    };
    this.progress = new Gauge({
      name: 'lanewake_progress_percent',
      help:
        'Mean of the latest numeric ctx.progress (0-100) of the items ' +
        'running in this process that reported one, by queue and type.',
      labelNames: ['queue', 'type'] as const,
      registers,
      collect: () => {
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
        this.progress.reset();
        for (const s of sums.values()) this.progress.set({ queue: s.queue, type: s.type }, s.sum / s.n);
      },
    });

    this.enqueueToStart = new Histogram({
      name: 'lanewake_enqueue_to_start_seconds',
      help:
        'Time from enqueue (item created_at) to its handler starting, in seconds; includes ' +
        'any requested delay and, for later attempts, the time since the first enqueue.',
      labelNames: ['queue', 'type'] as const,
      buckets: [...WAIT_BUCKETS_SECONDS],
      registers,
    });
    this.queueLag = new Histogram({
      name: 'lanewake_queue_lag_seconds',
      help:
        'How late an attempt started after it was due: its claim (started_at) minus its ' +
        'run_after, both on the ledger clock, in seconds. Excludes requested delays and retry ' +
        'backoff; includes waiting behind its lane head, its concurrency key or a fleet cap.',
      labelNames: ['queue', 'type'] as const,
      buckets: [...WAIT_BUCKETS_SECONDS],
      registers,
    });
    this.handlerDuration = new Histogram({
      name: 'lanewake_handler_duration_seconds',
      help:
        'How long a handler ran, from its call to its settling, in seconds (one ' +
        "observation per handler call: a coalesced group's head, not its members).",
      labelNames: ['queue', 'type'] as const,
      buckets: [...HANDLER_BUCKETS_SECONDS],
      registers,
    });
    this.stageDuration = new Histogram({
      name: 'lanewake_stage_duration_seconds',
      help:
        'How long each named stage of a handler (ctx.stage) ran, in seconds, ' +
        'by queue, type and stage; a stage that threw is observed too.',
      labelNames: ['queue', 'type', 'stage'] as const,
      buckets: [...HANDLER_BUCKETS_SECONDS],
      registers,
    });
    this.claimDuration = new Histogram({
      name: 'lanewake_claim_duration_seconds',
      help: 'Ledger round-trip time of one claim round, in seconds.',
      labelNames: ['queue'] as const,
      buckets: [...LATENCY_BUCKETS_SECONDS],
      registers,
    });

    this.fleet = new FleetGauges(registers);
    this.inFlight = new Gauge({
      name: 'lanewake_in_flight',
      help: 'Items this process holds: handlers running plus outcomes being written.',
      labelNames: ['queue'] as const,
      registers,
      collect: () =>
        this.setPerQueue(
          this.inFlight,
          (c) => c.inFlight(),
          (a, b) => a + b,
        ),
    });
    this.paused = new Gauge({
      name: 'lanewake_consumer_paused',
      help:
        "1 while this process's consumers of the queue are paused (they heard " +
        'lanewake pause) and claim nothing, else 0. Readiness is not affected.',
      labelNames: ['queue'] as const,
      registers,
      collect: () => this.setPerQueue(this.paused, (c) => (c.paused() ? 1 : 0), Math.max),
    });
    this.staleOnly = new Gauge({
      name: 'lanewake_consumer_stale_only',
      help:
        "1 while this process's consumers of the queue claim only rescued work (items whose " +
        'lease expired): the queue is stale-only (lanewake stale-only), their staleOnly ' +
        "option, or their staleOnlyGate tripped on the ledger's pool or claim time; else 0.",
      labelNames: ['queue'] as const,
      registers,
      collect: () => this.setPerQueue(this.staleOnly, (c) => (c.staleOnly() ? 1 : 0), Math.max),
    });
    this.redisConnected = new Gauge({
      name: 'lanewake_redis_connected',
      help:
        '1 when every observed consumer has a usable Redis wake ' +
        'channel, else 0 (also 0 with no consumer observed).',
      registers,
      collect: () => {
        const all = [...this.observed];
        this.redisConnected.set(all.length > 0 && all.every((c) => c.redisConnected()) ? 1 : 0);
      },
    });

    this.dbPool = new Gauge({
      name: 'lanewake_db_pool_connections',
      help:
        "The ledger pool's connections by state: open, in_use, " +
        'and waiting (requests queued for a free connection).',
      labelNames: ['state'] as const,
      registers,
      collect: () => {
        this.dbPool.reset();
        if (!this.ledger?.pool) return;
        const p = this.ledger.pool;
        this.dbPool.set({ state: 'open' }, p.total);
        this.dbPool.set({ state: 'in_use' }, p.inUse);
        this.dbPool.set({ state: 'waiting' }, p.waiting);
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
    for (const k of FOLDED_COUNTERS) this.folded[k].inc({ queue }, 0);
    this.claimDuration.zero({ queue });

    const onStarted = (item: ClaimedItem): void => {
      const labels = { queue: item.queue, type: item.type };
      this.claimed.inc(labels);
      if (item.group !== undefined) this.coalesced.inc(labels, item.group.ids.length);
      // created_at is on the ledger's clock; a clock behind ours must not give a negative latency.
      this.enqueueToStart.observe(labels, Math.max(0, Date.now() - item.createdAt.getTime()) / 1000);
      // Both on the ledger's clock. A claim of an item not yet due is impossible, but a handover's
      // start may tie its due time.
      if (item.startedAt !== null)
        this.queueLag.observe(labels, Math.max(0, item.startedAt.getTime() - item.runAfter.getTime()) / 1000);
    };
    const onOutcome = (item: ClaimedItem, outcome: Outcome, handlerMs: number | undefined): void => {
      const labels = { queue: item.queue, type: item.type };
      this.outcomeCounter(outcome)?.inc(labels);
      if (handlerMs !== undefined) this.handlerDuration.observe(labels, handlerMs / 1000);
    };
    const onStage = (item: ClaimedItem, stage: string, ms: number): void => {
      this.stageDuration.observe({ queue: item.queue, type: item.type, stage }, Math.max(0, ms) / 1000);
    };
    const onClaimRound = (round: { claimed: number; durationMs: number }): void => {
      this.claimDuration.observe({ queue }, Math.max(0, round.durationMs) / 1000);
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
    return this.fleet.refresh(ledger, opts);
  }

  /** Stops exporting the fleet-wide gauges and gives their lease up (a stopping worker, before its ledger closes). */
  releaseFleetGauges(ledger: FleetGaugeLedger): Promise<void> {
    return this.fleet.release(ledger);
  }

  /** This process exports the fleet-wide gauges now. */
  get exportsFleetGauges(): boolean {
    return this.fleet.holding;
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
        return this.completed;
      case 'retried':
        return this.retried;
      case 'dead':
        return this.dead;
      case 'released':
        return this.released;
      case 'skipped':
        return this.skipped;
      case 'leaseLost':
        return this.leaseLost;
      default:
        return undefined;
    }
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
        if (now[k] > c.seen[k]) this.folded[k].inc({ queue: c.queue }, now[k] - c.seen[k]);
        c.seen[k] = now[k];
      }
    }
  }
}
