import type { Consumer } from '../consumer/consumer.js';
import { ValidationError } from '../errors.js';
import { Ledger } from '../ledger/ledger.js';
import { createLogger, type Logger } from '../log.js';
import { sleep } from '../sleep.js';
import { WakeChannel } from '../wake/wake-channel.js';
import { ControlWatch } from '../wake/control-watch.js';
import { ledgerReadiness, type NamedReadinessCheck, type Readiness } from './admin-server.js';
import type { QueueConfig, WorkerConfig } from './config.js';
import type { HandlersByQueue } from './handlers-module.js';
import { holdScheduleFiring } from '../schedules/firing.js';
import { planPools, type PoolPlan } from '../consumer/pools.js';
import { QueueRunner } from './queue-runner.js';
import { isPattern, QueuePatterns, type ServedQueue } from './queue-patterns.js';
import { DEFAULT_CONCURRENCY } from '../consumer/options.js';
import type { QueueRow } from '../ledger/sql/queues/drain.js';
import { effectiveSettings, Incarnations, liveSettingsOf, type EffectiveSettings } from './live-settings.js';
import { Reconciler } from './reconciler.js';
import { schemaCurrentOnceReachable } from './backoff.js';

export const EXIT_OK = 0;
export const EXIT_OWNERSHIP_LOST = 3;
/** How long stop() waits for `beforeLedgerClose`. */
const STOP_HOOK_MS = 2_000;

export type OwnershipState = 'owner' | 'standby' | 'lost';

export interface SupervisorOptions {
  config: WorkerConfig;
  handlers: HandlersByQueue;
  logger?: Logger;
  /** Every consumer started (and restarted), e.g. to observe it with metrics; may return a detach function. */
  onConsumer?: (consumer: Consumer<never>) => (() => void) | void;
  /** Called once a queue is let go (deleted, or no pattern matches it), its consumers stopped: e.g. drop its series. */
  onQueueGone?: (queue: string) => Promise<void>;
  /** Called after each reconciler pass, e.g. to refresh gauges. */
  afterReconcile?: (ledger: Ledger) => Promise<void>;
  /**
   * Called once on stop, after the reconciler's last pass and before the ledger closes, e.g. to give
   * up the fleet gauges' lease.
   */
  beforeLedgerClose?: (ledger: Ledger) => Promise<void>;
}

/**
 * The worker process (docs/design/supervisor.md, "Supervisor and operations"): one restartable consumer per configured
 * queue, the reconciler, and ownership epochs. `done` resolves with the exit
 * code once it has stopped: 0 after stop(), 3 after this deployment lost a
 * queue to a newer activation.
 */
export class Supervisor {
  readonly ledger: Ledger;
  readonly wake: WakeChannel | undefined;
  readonly log: Logger;
  /** Per configured queue, its executor pools (one undefined: no pools, one consumer of every class it claims). */
  private readonly pools: (PoolPlan | undefined)[][];
  /** The config's queue patterns and the ledger's queues they match now. */
  private readonly patterns: QueuePatterns;
  /** Per queue, one runner per executor pool (one when the queue has no pools). */
  readonly runners = new Map<string, QueueRunner[]>();
  readonly ownership = new Map<string, { state: OwnershipState; epoch?: number }>();
  readonly done: Promise<number>;
  private resolveDone: (code: number) => void = () => undefined;
  private exitCode = EXIT_OK;
  private reconciler: Reconciler | undefined;
  private ownershipTimer: NodeJS.Timeout | undefined;
  private queuesTimer: NodeJS.Timeout | undefined;
  private queuesRead: Promise<void> | undefined;
  /**
   * How many times it has read the ledger's queues (one read each reconcile interval). A queue defined after read n
   * is served by read n + 2 at the latest: read n + 1 may have been sent before the definition committed.
   */
  queueReads = 0;
  private stopping: Promise<void> | undefined;
  private checking: Promise<void> | undefined;
  /** A check was asked for while one ran (it may have read the ledger before what prompted it): run once more. */
  private checkAgain = false;
  /** Stops this process firing the ledger's schedules (src/schedules/firing.ts). */
  private releaseFiring: (() => Promise<void>) | undefined;
  private controlWatch: ControlWatch | undefined;
  /** Each served queue's incarnation as last read: a queue made again gets fresh consumers. */
  private readonly incarnations = new Incarnations();
  /** Per served queue, the settings its consumers run with and where each came from (/readyz). */
  private readonly effective = new Map<string, EffectiveSettings>();
  /** Consumers of a queue's older incarnation finishing what they hold; stop() waits for them. */
  private readonly retiring = new Set<Promise<unknown>>();

  constructor(private readonly options: SupervisorOptions) {
    const { config } = options;
    this.log = options.logger ?? createLogger('lanewake.worker');
    for (const q of config.queues) {
      if (!options.handlers[q.name]) {
        throw new ValidationError(
          [{ field: `handlers.${q.name}`, message: `the handler module has no handlers for queue ${q.name}` }],
          'worker config',
        );
      }
    }
    // Planned here, so a pool that cannot be is refused before anything starts, its field named.
    this.pools = config.queues.map((q, i) =>
      q.pools === undefined
        ? [undefined]
        : planPools(q.concurrency ?? DEFAULT_CONCURRENCY, q.pools, q.classes, `queues.${i}.pools`),
    );
    this.patterns = new QueuePatterns(config.queues);
    this.ledger = new Ledger({ url: config.databaseUrl, poolSize: config.poolSize, tablePrefix: config.tablePrefix });
    this.wake = config.redisUrl
      ? new WakeChannel({ redis: config.redisUrl, keyPrefix: config.redisKeyPrefix, logger: this.log })
      : undefined;
    this.done = new Promise((resolve) => {
      this.resolveDone = resolve;
    });
  }

  async start(): Promise<void> {
    const { config } = this.options;
    await schemaCurrentOnceReachable(this.ledger, this.log, () => this.stopping !== undefined);
    await this.reconcileSchedules();
    // Held before any consumer of this ledger holds it, so the firer runs with this config's check interval.
    this.releaseFiring = holdScheduleFiring({
      ledger: this.ledger,
      wake: this.wake,
      log: this.log,
      checkIntervalMs: config.scheduleCheckMs,
    });
    for (const [i, q] of config.queues.entries()) {
      if (isPattern(q.name)) continue;
      this.runners.set(q.name, this.makeRunners(q, i));
      if (q.ownership) this.ownership.set(q.name, { state: 'standby' });
    }
    // The ledger's queues read before any consumer starts: each starts with the queue's settings, not the defaults.
    await this.reconcileQueues();
    // Standby queues have no consumer to hear an activation's broadcast, so the supervisor listens itself.
    // Its places on the control streams are taken before the ledger is read and before start() returns:
    // an activation the ledger read below misses commits after it, so its broadcast comes after them.
    if (this.ownership.size > 0 && this.wake)
      this.controlWatch = new ControlWatch(this.wake, [...this.ownership.keys()], () => void this.checkOwnership());
    const watchFrom = await this.controlWatch?.positions();
    await this.checkOwnership();
    for (const q of config.queues) if (!q.ownership && !isPattern(q.name)) this.startRunner(q.name);
    if (this.ownership.size > 0) {
      this.ownershipTimer = setInterval(() => void this.checkOwnership(), config.ownershipCheckMs);
      this.ownershipTimer.unref();
      if (watchFrom) this.controlWatch?.start(watchFrom);
    }
    this.reconciler = new Reconciler({
      ledger: this.ledger,
      wake: this.wake,
      queues: () => [...this.runners.keys()],
      intervalMs: config.reconcileIntervalMs,
      retentionMs: config.retentionMs,
      log: this.log,
      afterPass: () => this.options.afterReconcile?.(this.ledger) ?? Promise.resolve(),
    });
    this.reconciler.start();
    // Apart from the maintenance pass, which takes longer as queues are added: a new queue waits for neither.
    this.queuesTimer = setInterval(() => void this.reconcileQueuesLogged(), config.reconcileIntervalMs);
    this.queuesTimer.unref();
    this.log.info({ queues: [...this.runners.keys()], deployment: config.deployment }, 'worker started');
  }

  /** One restartable consumer per executor pool of `q` (config entry `index`; a matched queue has its pattern's). */
  private makeRunners(q: QueueConfig, index: number): QueueRunner[] {
    const { config } = this.options;
    return (this.pools[index] ?? [undefined]).map(
      (pool) =>
        new QueueRunner({
          queue: q,
          pool,
          ledger: this.ledger,
          wake: this.wake,
          handlers: this.options.handlers[config.queues[index]?.name ?? q.name] ?? {},
          log: this.log,
          drainTimeoutMs: config.drainTimeoutMs,
          epoch: () => this.ownership.get(q.name)?.epoch,
          ...(this.options.onConsumer ? { onConsumer: this.options.onConsumer } : {}),
        }),
    );
  }

  /**
   * Reads the ledger's queues (queue-patterns.ts): a queue a pattern now
   * matches gets its consumers, one whose row went is let go; and which
   * served queues are drain-only, for /readyz. Run at start and every
   * reconcile interval, so a new queue is served within one.
   */
  private reconcileQueuesLogged(): Promise<void> {
    this.queuesRead ??= this.reconcileQueues()
      .catch((error: unknown) => this.log.warn({ err: (error as Error).message }, 'reading the ledger queues failed'))
      .finally(() => (this.queuesRead = undefined));
    return this.queuesRead;
  }

  private async reconcileQueues(): Promise<void> {
    if (this.stopping) return;
    const rows = await this.ledger.queueRows(this.patterns.any ? undefined : this.pinnedNames());
    this.queueReads++;
    const changes = this.patterns.reconcile(rows);
    for (const { queue, entry, config } of changes.start)
      this.runners.set(queue, this.makeRunners({ ...config, name: queue }, entry));
    // Before the new ones start: they start with the queue's settings.
    this.followRows(rows);
    for (const { queue } of changes.start) this.startRunner(queue);
    if (changes.start.length + changes.stop.length > 0)
      this.log.info({ started: changes.start.map((c) => c.queue), stopped: changes.stop }, 'queues matched');
    await Promise.allSettled(
      changes.stop.map(async (queue) => {
        const runners = this.runners.get(queue) ?? [];
        this.runners.delete(queue);
        this.incarnations.forget(queue);
        this.effective.delete(queue);
        await Promise.allSettled(runners.map((r) => r.stop()));
        await this.options.onQueueGone?.(queue);
      }),
    );
  }

  private pinnedNames(): string[] {
    return this.options.config.queues.filter((q) => !isPattern(q.name)).map((q) => q.name);
  }

  /**
   * Each served queue's row as read now (docs/design/supervisor.md, "Queue settings in the ledger"): its settings
   * retune its consumers at once, save those the config pins; a new incarnation (deleted and made again) gets
   * fresh consumers, and those of the old one stop, finishing what they hold.
   */
  private followRows(rows: readonly QueueRow[]): void {
    const byName = new Map(rows.map((r) => [r.queue, r]));
    for (const [queue, runners] of this.runners) {
      const index = this.entryIndex(queue);
      const entry = this.options.config.queues[index];
      if (entry === undefined) continue;
      const row = byName.get(queue);
      const settings = effectiveSettings(entry, row);
      this.effective.set(queue, settings);
      if (!this.incarnations.changed(queue, row)) {
        for (const r of runners) r.retune(liveSettingsOf(settings), settings.concurrencyLimit.value);
        continue;
      }
      const fresh = this.makeRunners({ ...entry, name: queue }, index);
      for (const r of fresh) r.retune(liveSettingsOf(settings), settings.concurrencyLimit.value);
      this.runners.set(queue, fresh);
      this.log.info({ queue, incarnation: row?.incarnation }, 'queue made again: its consumers replaced');
      const retired = Promise.allSettled(runners.map((r) => r.stop()));
      this.retiring.add(retired);
      void retired.finally(() => this.retiring.delete(retired));
      const owned = !this.ownership.has(queue) || this.ownership.get(queue)?.state === 'owner';
      if (owned) this.startRunner(queue);
    }
  }

  /** The config entry giving a served queue's settings: its own, else the pattern it matched. */
  private entryIndex(queue: string): number {
    const own = this.options.config.queues.findIndex((q) => q.name === queue);
    return own >= 0 ? own : (this.patterns.entryOf(queue) ?? -1);
  }

  /** The queues this worker serves now, and why, with their incarnations and settings (/readyz). */
  served(): ServedQueue[] {
    return this.patterns.served(this.pinnedNames()).map((q) => {
      const incarnation = this.incarnations.of(q.queue);
      const settings = this.effective.get(q.queue);
      return { ...q, ...(incarnation !== undefined ? { incarnation } : {}), ...(settings ? { settings } : {}) };
    });
  }

  /**
   * The config file's `schedules:` made the ledger's (docs/operations/scaling.md,
   * "Recurring schedules"): made or replaced, and the file-declared ones it
   * no longer lists removed. Without a `schedules:` section the ledger's
   * schedules are left alone, so a worker of another role does not remove them.
   */
  private async reconcileSchedules(): Promise<void> {
    const declared = this.options.config.schedules;
    if (declared === undefined) return;
    const { upserted, removed } = await this.ledger.schedules.reconcileConfig(declared);
    this.log.info({ declared: upserted.length, removed }, 'schedules reconciled with the config file');
  }

  /** Graceful stop: drain every consumer, then close connections. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      if (this.ownershipTimer) clearInterval(this.ownershipTimer);
      if (this.queuesTimer) clearInterval(this.queuesTimer);
      await this.queuesRead;
      await this.controlWatch?.stop();
      await Promise.allSettled([...this.runners.values()].flat().map((r) => r.stop()));
      await Promise.allSettled([...this.retiring]);
      await this.reconciler?.stop();
      await this.releaseFiring?.();
      // Bounded: a ledger that is down must not hold the stop (the lease then runs out by itself).
      const hook = this.options
        .beforeLedgerClose?.(this.ledger)
        .catch((error: unknown) => this.log.warn({ err: (error as Error).message }, 'stop hook failed'));
      if (hook) await Promise.race([hook, sleep(STOP_HOOK_MS)]);
      await this.wake?.close().catch(() => undefined);
      await this.ledger.close().catch(() => undefined);
      this.log.info({ exitCode: this.exitCode }, 'worker stopped');
      this.resolveDone(this.exitCode);
    })();
    return this.stopping;
  }

  /** For /readyz: ledger reachable, schema current, every ownership queue owned, not shutting down. */
  readiness(): Promise<Readiness> {
    const extra: NamedReadinessCheck[] = [...this.ownership.keys()].map((queue) => ({
      name: `ownership:${queue}`,
      check: async () => {
        const o = this.ownership.get(queue);
        return o?.state === 'owner'
          ? { ok: true, detail: `epoch ${o.epoch}` }
          : { ok: false, detail: o?.state ?? 'unknown' };
      },
    }));
    extra.push({
      name: 'queues',
      check: async () => this.patterns.check(this.served()),
    });
    extra.push({
      name: 'shutdown',
      check: async () => (this.stopping ? { ok: false, detail: 'stopping' } : { ok: true }),
    });
    return ledgerReadiness(this.ledger, extra).then((r) => ({ ...r, queues: this.served() }));
  }

  /**
   * Reads each ownership queue's current (deployment, epoch). A standby
   * queue named for this deployment starts claiming under that epoch; an
   * owned queue whose epoch moved on is lost: the whole worker stops
   * claiming, drains and exits with code 3. Claims under the stale epoch are
   * refused by the ledger in any case.
   */
  checkOwnership(): Promise<void> {
    if (this.checking) {
      // The check under way may have read a queue before the activation that prompted this call.
      this.checkAgain = true;
      return this.checking;
    }
    this.checking = (async () => {
      try {
        do {
          this.checkAgain = false;
          await this.readOwnership();
        } while (this.checkAgain && !this.stopping);
      } finally {
        this.checking = undefined;
      }
    })();
    return this.checking;
  }

  /**
   * Starts a queue's consumer and, with the first one, the wake channel's
   * timer processor (which this supervisor owns): due timers publish wake-ups.
   */
  private startRunner(queue: string): void {
    const wake = this.wake;
    if (wake && !wake.timersStarted) wake.startTimers();
    for (const runner of this.runners.get(queue) ?? []) runner.start();
  }

  private async readOwnership(): Promise<void> {
    const deployment = this.options.config.deployment;
    for (const [queue, mine] of this.ownership) {
      if (mine.state === 'lost' || this.stopping) continue;
      let current;
      try {
        current = await this.ledger.ownership(queue);
      } catch (error) {
        this.log.warn({ queue, err: (error as Error).message }, 'ownership check failed');
        continue;
      }
      const ours = current !== undefined && current.deployment === deployment;
      if (mine.state === 'owner') {
        if (!ours || current?.epoch !== mine.epoch) {
          this.ownership.set(queue, { state: 'lost', ...(mine.epoch !== undefined ? { epoch: mine.epoch } : {}) });
          this.exitCode = EXIT_OWNERSHIP_LOST;
          this.log.warn(
            { queue, ourEpoch: mine.epoch, now: current },
            'ownership lost to a newer activation: stopping',
          );
          void this.stop();
          return;
        }
      } else if (ours && current) {
        this.ownership.set(queue, { state: 'owner', epoch: current.epoch });
        this.log.info({ queue, epoch: current.epoch }, 'ownership taken: claiming');
        this.startRunner(queue);
      }
    }
  }
}
