import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { FleetGauges } from './fleet-gauges.js';

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

export type ItemLabels = 'queue' | 'type';

/** The consumer counters folded into a Prometheus counter at each scrape. */
export type FoldedCounter = 'wakeEntriesRead' | 'handedOver' | 'stepsRecorded' | 'stepsResumed' | 'progressWrites';

/** What sets the scrape-time series: LanewakeMetrics reads them from the consumers and ledger it observes. */
export interface MetricCollectors {
  /** Folds the consumers' cumulative counters into the `folded` counters (either may be collected first). */
  foldCounters(): void;
  progress(gauge: Gauge<ItemLabels>): void;
  inFlight(gauge: Gauge<'queue'>): void;
  paused(gauge: Gauge<'queue'>): void;
  staleOnly(gauge: Gauge<'queue'>): void;
  redisConnected(gauge: Gauge): void;
  dbPool(gauge: Gauge<'state'>): void;
}

/** Every lanewake metric of one process, by what it counts. */
export interface LanewakeMetricSet {
  readonly claimed: Counter<ItemLabels>;
  readonly completed: Counter<ItemLabels>;
  readonly retried: Counter<ItemLabels>;
  readonly dead: Counter<ItemLabels>;
  readonly released: Counter<ItemLabels>;
  readonly skipped: Counter<ItemLabels>;
  readonly leaseLost: Counter<ItemLabels>;
  readonly coalesced: Counter<ItemLabels>;
  readonly folded: Readonly<Record<FoldedCounter, Counter<'queue'>>>;
  readonly progress: Gauge<ItemLabels>;
  readonly enqueueToStart: Histogram<ItemLabels>;
  readonly queueLag: Histogram<ItemLabels>;
  readonly handlerDuration: Histogram<ItemLabels>;
  readonly stageDuration: Histogram<ItemLabels | 'stage'>;
  readonly claimDuration: Histogram<'queue'>;
  readonly fleet: FleetGauges;
  readonly inFlight: Gauge<'queue'>;
  readonly redisConnected: Gauge;
  readonly paused: Gauge<'queue'>;
  readonly staleOnly: Gauge<'queue'>;
  readonly dbPool: Gauge<'state'>;
}

/**
 * Registers lanewake's metrics on `registry`, in the order the exposition lists them
 * (names, help and labels are what dashboards and docs/operations pages rely on).
 */
export function defineMetrics(registry: Registry, collectors: MetricCollectors): LanewakeMetricSet {
  const registers = [registry];
  const itemCounter = (name: string, help: string): Counter<ItemLabels> =>
    new Counter({ name, help, labelNames: ['queue', 'type'] as const, registers });

  const claimed = itemCounter('lanewake_items_claimed_total', 'Items claimed by this process (one per handler start).');
  const completed = itemCounter('lanewake_items_completed_total', 'Items this process finalized as completed.');
  const retried = itemCounter('lanewake_items_retried_total', 'Failed attempts this process scheduled for a retry.');
  const dead = itemCounter(
    'lanewake_items_dead_total',
    'Items this process finalized as dead (permanent error, budget spent, invalid payload, unowned type).',
  );
  const released = itemCounter(
    'lanewake_items_released_total',
    'Items this process released without spending an attempt (defer, deadline, shutdown).',
  );
  const skipped = itemCounter(
    'lanewake_items_skipped_total',
    'Items this process finalized as skipped (the handler threw SkipError or called ctx.skip: nothing to do).',
  );
  const leaseLost = itemCounter(
    'lanewake_lease_lost_total',
    'Attempts whose lease was lost before their outcome could be written.',
  );
  const coalesced = itemCounter(
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
      collect: () => collectors.foldCounters(),
    });
  const folded = {
    wakeEntriesRead: foldedCounter('lanewake_wake_entries_read_total', 'Wake-up stream entries read by this process.'),
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
  const progress = new Gauge({
    name: 'lanewake_progress_percent',
    help:
      'Mean of the latest numeric ctx.progress (0-100) of the items ' +
      'running in this process that reported one, by queue and type.',
    labelNames: ['queue', 'type'] as const,
    registers,
    collect() {
      collectors.progress(this);
    },
  });

  const enqueueToStart = new Histogram({
    name: 'lanewake_enqueue_to_start_seconds',
    help:
      'Time from enqueue (item created_at) to its handler starting, in seconds; includes ' +
      'any requested delay and, for later attempts, the time since the first enqueue.',
    labelNames: ['queue', 'type'] as const,
    buckets: [...WAIT_BUCKETS_SECONDS],
    registers,
  });
  const queueLag = new Histogram({
    name: 'lanewake_queue_lag_seconds',
    help:
      'How late an attempt started after it was due: its claim (started_at) minus its ' +
      'run_after, both on the ledger clock, in seconds. Excludes requested delays and retry ' +
      'backoff; includes waiting behind its lane head, its concurrency key or a fleet cap.',
    labelNames: ['queue', 'type'] as const,
    buckets: [...WAIT_BUCKETS_SECONDS],
    registers,
  });
  const handlerDuration = new Histogram({
    name: 'lanewake_handler_duration_seconds',
    help:
      'How long a handler ran, from its call to its settling, in seconds (one ' +
      "observation per handler call: a coalesced group's head, not its members).",
    labelNames: ['queue', 'type'] as const,
    buckets: [...HANDLER_BUCKETS_SECONDS],
    registers,
  });
  const stageDuration = new Histogram({
    name: 'lanewake_stage_duration_seconds',
    help:
      'How long each named stage of a handler (ctx.stage) ran, in seconds, ' +
      'by queue, type and stage; a stage that threw is observed too.',
    labelNames: ['queue', 'type', 'stage'] as const,
    buckets: [...HANDLER_BUCKETS_SECONDS],
    registers,
  });
  const claimDuration = new Histogram({
    name: 'lanewake_claim_duration_seconds',
    help: 'Ledger round-trip time of one claim round, in seconds.',
    labelNames: ['queue'] as const,
    buckets: [...LATENCY_BUCKETS_SECONDS],
    registers,
  });

  const fleet = new FleetGauges(registers);
  const inFlight = new Gauge({
    name: 'lanewake_in_flight',
    help: 'Items this process holds: handlers running plus outcomes being written.',
    labelNames: ['queue'] as const,
    registers,
    collect() {
      collectors.inFlight(this);
    },
  });
  const paused = new Gauge({
    name: 'lanewake_consumer_paused',
    help:
      "1 while this process's consumers of the queue are paused (they heard " +
      'lanewake pause) and claim nothing, else 0. Readiness is not affected.',
    labelNames: ['queue'] as const,
    registers,
    collect() {
      collectors.paused(this);
    },
  });
  const staleOnly = new Gauge({
    name: 'lanewake_consumer_stale_only',
    help:
      "1 while this process's consumers of the queue claim only rescued work (items whose " +
      'lease expired): the queue is stale-only (lanewake stale-only), their staleOnly ' +
      "option, or their staleOnlyGate tripped on the ledger's pool or claim time; else 0.",
    labelNames: ['queue'] as const,
    registers,
    collect() {
      collectors.staleOnly(this);
    },
  });
  const redisConnected = new Gauge({
    name: 'lanewake_redis_connected',
    help:
      '1 when every observed consumer has a usable Redis wake ' + 'channel, else 0 (also 0 with no consumer observed).',
    registers,
    collect() {
      collectors.redisConnected(this);
    },
  });

  const dbPool = new Gauge({
    name: 'lanewake_db_pool_connections',
    help:
      "The ledger pool's connections by state: open, in_use, " + 'and waiting (requests queued for a free connection).',
    labelNames: ['state'] as const,
    registers,
    collect() {
      collectors.dbPool(this);
    },
  });

  return {
    claimed,
    completed,
    retried,
    dead,
    released,
    skipped,
    leaseLost,
    coalesced,
    folded,
    progress,
    enqueueToStart,
    queueLag,
    handlerDuration,
    stageDuration,
    claimDuration,
    fleet,
    inFlight,
    paused,
    staleOnly,
    redisConnected,
    dbPool,
  };
}
