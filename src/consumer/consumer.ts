import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { wakeReadChannel, type WakeReadMessage } from '../diagnostics.js';
import { ValidationError } from '../errors.js';
import type { ClaimedItem, SweepSignal } from '../ledger/types.js';
import { createLogger, type Logger } from '../log.js';
import { Maintainer } from '../maintenance/maintainer.js';
import { Producer } from '../producer/producer.js';
import type { Outbox } from './job-context.js';
import { StaleGate, type StaleOnlyReason } from './stale-gate.js';
import { sleep } from '../sleep.js';
import type { ControlMessage, WakeMessage } from '../wake/messages.js';
import { holdScheduleFiring } from '../schedules/firing.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import { packageVersion } from '../version.js';
import { WakeReader } from '../wake/wake-reader.js';
import { ClaimScheduler, type SchedulerHost } from './claim-scheduler.js';
import { BatchCompleter } from './completer.js';
import { newConsumerCounters, type ConsumerCounters, type ConsumerEvents } from './counters.js';
import { coalesceClaimOf, type CoalesceClaim } from './coalescing.js';
import { Handovers, type HandoverWay } from './handover.js';
import { startLeaseClock } from './lease-keeper.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { Ledger } from '../ledger/ledger.js';
import { OfferDesk, type OfferDeskHost } from './offer-desk.js';
import { QueueFlags } from './queue-flags.js';
import { consumerSettingsSchema, type ConsumerOptions, type ConsumerSettings } from './options.js';
import { ConsumerRegistration } from './registration.js';
import { ProgressBatch, RenewalBatch } from './renewals.js';
import { Sweeper } from './sweeper.js';
import { handlerTable } from './handler-table.js';
import type { RegisteredHandler } from './types.js';
import { loadOtel } from '../tracing/otel.js';

export type { ConsumerCounters, ConsumerEvents } from './counters.js';
export type { ConsumerOptions } from './options.js';

const FOLLOW_UP_MIN_INTERVAL_MS = 20;
/** At stop, how long handoffs of offers producers took may still come before the ledger is asked for their items. */
const OFFER_HANDOFF_WAIT_MS = 300;
/** A consumer with handlers for more types than this makes no offers (each offer lists them). */
const MAX_OFFER_TYPES = 32;
/** Most expired leases reclaimed, and most due probes released, per sweep. */
const SWEEP_MAINTENANCE_BATCH = 500;

/** The counter each way in without a claim round adds to. */
const HANDOVER_COUNTER = {
  insert: 'claimedAtInsert',
  offer: 'handedOver',
  successor: 'claimedWithCompletion',
} as const;

/**
 * One consumer per (process, queue): a claim scheduler feeding `concurrency`
 * executor slots (docs/design.md §6), a wake reader that tells it which items
 * to claim, handovers of items claimed for it elsewhere, and a sweeper of the
 * ledger as the backstop (faster while Redis is away). It finalizes only
 * through the ledger.
 */
export class Consumer<DB = Record<string, never>> extends EventEmitter<ConsumerEvents> {
  readonly settings: ConsumerSettings;
  readonly name: string;
  readonly counters: ConsumerCounters = newConsumerCounters();

  private readonly ledger: ConsumerLedger;
  private readonly wake: WakeChannel | undefined;
  /** Stops this process firing the ledger's schedules, if this consumer was the last to hold it (src/schedules/firing.ts). */
  private releaseFiring: (() => Promise<void>) | undefined;
  private readonly firingLedger: Ledger;
  private readonly outbox: Outbox;
  /** Whether claims take only rescued work now, and why (stale-gate.ts). */
  private readonly gate: StaleGate;
  private readonly handlers: Map<string, RegisteredHandler<DB>>;
  private readonly log: Logger;
  private readonly scheduler: ClaimScheduler<DB>;
  /** Items claimed for it outside its claim rounds: at insert, under an offer, as a lane's successor. */
  private readonly handovers: Handovers;
  private readonly sweeper: Sweeper;
  private reader: WakeReader | undefined;
  private loopsSettled: Promise<void> = Promise.resolve();
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  private lastFollowUpAt = 0;
  private readonly flags: QueueFlags;
  /** The sweep's share of the ledger's housekeeping for this queue (`maintenance` on). */
  private readonly maintainer: Maintainer | undefined;
  private unregisterLocal: (() => void) | undefined;
  /** Its row in the ledger's registry of live consumers. */
  private readonly registration: ConsumerRegistration;
  /** One clock for every running item's lease renewal and long deadline. */
  private clock: NodeJS.Timeout | undefined;
  /** Its offers to producers in any process (with a wake channel). */
  private readonly offers: OfferDesk | undefined;
  /** What its claims coalesce (docs/design.md §4, Coalescing); undefined when no handler does. */
  private readonly coalesce: CoalesceClaim | undefined;

  constructor(options: ConsumerOptions<DB>) {
    super();
    const { ledger, wake, handlers, logger, ...settings } = options;
    const parsed = consumerSettingsSchema.safeParse(settings);
    if (!parsed.success) throw ValidationError.fromZod(parsed.error, 'consumer options');
    this.settings = parsed.data;
    this.ledger = ledger;
    this.firingLedger = ledger;
    this.wake = wake;
    // ctx.enqueue: in the handler's ctx.transaction, announced after its commit (without Redis, found by the sweeps).
    const outboxProducer = wake ? new Producer({ ledger, wake }) : new Producer({ ledger });
    this.outbox = (trx, inputs) => outboxProducer.enqueueWithin(trx, inputs);
    this.handlers = handlerTable(handlers, { ledger });
    this.coalesce = coalesceClaimOf(this.handlers);
    this.name = this.settings.name ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.log = (logger ?? createLogger('lanewake.consumer')).child({ queue: this.settings.queue, consumer: this.name });
    this.maintainer = this.settings.maintenance
      ? new Maintainer({
          ledger,
          wake,
          queues: [this.settings.queue],
          log: this.log,
          batchSize: SWEEP_MAINTENANCE_BATCH,
        })
      : undefined;
    this.gate = new StaleGate(
      {
        always: this.settings.staleOnly,
        poolWaiting: this.settings.staleOnlyGate?.poolWaiting,
        claimMs: this.settings.staleOnlyGate?.claimMs,
      },
      () => ledger.pool,
    );
    this.handovers = new Handovers(this.handoverHost());
    this.scheduler = new ClaimScheduler(
      this.ledger,
      this.settings,
      this.name,
      this.counters,
      this.log,
      this.schedulerHost(),
    );
    this.sweeper = new Sweeper(
      {
        queue: this.settings.queue,
        log: this.log,
        housekeeping: (signal) => this.housekeeping(signal),
        lookForWork: () => this.scheduler.kick(),
        counted: (counter) => this.counters[counter]++,
      },
      ledger,
      {
        pollIntervalMs: this.settings.pollIntervalMs,
        redisDownPollMs: this.settings.redisDownPollMs,
        shared: wake !== undefined,
      },
    );
    this.offers = wake ? new OfferDesk(this.offerDeskHost(), this.handovers, wake.offers) : undefined;
    this.flags = new QueueFlags({
      queue: this.settings.queue,
      ledger,
      log: this.log,
      isPaused: () => this.scheduler.isPaused,
      setStaleOnly: (on) => this.gate.setQueue(on),
      setPaused: (paused) => {
        this.scheduler.setPaused(paused);
        if (paused) this.offers?.look();
      },
    });
    const s = this.settings;
    this.registration = new ConsumerRegistration(
      ledger,
      {
        name: this.name,
        queue: s.queue,
        classes: s.classes,
        types: s.types ?? null,
        concurrency: s.concurrency,
        maxProcessing: s.maxProcessing ?? null,
        epoch: s.epoch ?? null,
        version: packageVersion(),
      },
      this.log,
      () => this.gate.reason(),
    );
  }

  /** Items this consumer holds: handlers running plus outcomes being written. */
  get inFlight(): number {
    return this.scheduler.running.size + this.scheduler.finalizing.size;
  }

  /** The latest numeric ctx.progress of each running item that reported one (the metrics' progress gauge). */
  get progressOfRunning(): { type: string; percent: number }[] {
    const out: { type: string; percent: number }[] = [];
    for (const run of this.scheduler.running.values())
      if (run.progressPercent !== undefined) out.push({ type: run.item.type, percent: run.progressPercent });
    return out;
  }

  /** The types it has handlers for and claims. */
  private claimedTypes(): string[] {
    return [...this.handlers.keys()].filter(
      (t) => this.settings.types === undefined || this.settings.types.includes(t),
    );
  }

  get redisConnected(): boolean {
    return this.reader?.redisUp === true;
  }

  /**
   * Why it claims only rescued work now (docs/design.md §6, "Stale-only
   * claims"): its queue is stale-only in the ledger, its own option, its
   * pool saturated or its claims slow; undefined while it claims as usual.
   */
  get staleOnly(): StaleOnlyReason | undefined {
    return this.gate.reason();
  }

  /** Its queue is paused (Ledger.pause), as this consumer last heard: it claims nothing. */
  get paused(): boolean {
    return this.scheduler.isPaused;
  }

  async start(): Promise<void> {
    if (this.state !== 'new') throw new Error(`consumer already ${this.state}`);
    // OpenTelemetry, if installed, is loaded before the first attempt, whose span it makes (src/tracing/).
    await Promise.all([this.ledger.assertSchemaCurrent(), loadOtel()]);
    // Stored in the ledger: every producer's admission and every consumer's hand-on of the queue holds to it.
    if (this.settings.concurrencyLimit !== undefined)
      await this.ledger.setConcurrencyLimit(this.settings.queue, this.settings.concurrencyLimit);
    for (const [type, def] of this.handlers) {
      if (def.concurrencyLimit !== undefined)
        await this.ledger.setConcurrencyLimit(this.settings.queue, def.concurrencyLimit, { type });
    }
    if (this.settings.fairness !== undefined)
      await this.ledger.setFairness(this.settings.queue, this.settings.fairness);
    await this.flags.start();
    this.state = 'running';
    await this.registration.start();
    this.scheduler.start();
    // Any process running a consumer fires the ledger's due schedules (one firer per ledger and process).
    this.releaseFiring = holdScheduleFiring({ ledger: this.firingLedger, wake: this.wake, log: this.log });
    if (this.wake) {
      const wake = this.wake;
      const { queue, classes, readBlockMs } = this.settings;
      this.reader = new WakeReader(
        wake,
        { queue, classes, name: this.name, readBlockMs, log: this.log },
        {
          readRoom: () => (this.scheduler.isPaused ? 0 : this.scheduler.freeSlots()),
          onEntries: (entries) => {
            if (this.listenerCount('wakeRead') > 0)
              this.emit('wakeRead', { ids: entries.flatMap((e) => e.ids), entries: entries.length });
            if (wakeReadChannel.hasSubscribers) {
              const message: WakeReadMessage = {
                queue,
                consumer: this.name,
                atMs: Date.now(),
                ids: entries.flatMap((e) => e.ids),
                entries: entries.length,
              };
              wakeReadChannel.publish(message);
            }
            this.scheduler.takeEntries(entries);
          },
          onControl: (message) => this.takeControl(message),
          onRedisHealth: (up) => this.sweeper.redisHealth(up),
        },
      );
      // Joins the group before the first claim, so no wake-up published from here on is missed.
      await this.reader.start();
      // Any process with a consumer runs the timer processor (due timers publish wake-ups). The
      // channel's owner starts it (the supervisor does); if nobody did, it starts here.
      if (!wake.timersStarted) wake.startTimers();
      this.unregisterLocal = wake.local.register({
        queue,
        classes,
        takeWake: this.takeLocalWake,
        atInsert: (queueClass, types, n) => this.handovers.atInsert(queueClass, types, n),
      });
      this.offers?.start();
    }
    this.sweeper.start();
    this.clock = startLeaseClock(() => this.scheduler.running.values(), this.settings.leaseMs);
    this.loopsSettled = this.scheduler.loop();
    this.loopsSettled.catch(() => undefined);
    this.log.info({ concurrency: this.settings.concurrency, wake: this.wake !== undefined }, 'consumer started');
  }

  /**
   * Graceful stop (docs/design.md §6): stop claiming and reading; let in-flight
   * handlers finish within `drainTimeoutMs` (default: the setting); then abort them and finalize
   * those that settle (released without spending an attempt). A handler
   * that still runs is never released: its lease is left to expire.
   */
  async stop(opts: { drainTimeoutMs?: number } = {}): Promise<void> {
    if (this.state === 'stopped' || this.state === 'stopping') return;
    if (this.state === 'new') {
      this.state = 'stopped';
      return;
    }
    this.state = 'stopping';
    this.scheduler.stopClaiming();
    this.unregisterLocal?.();
    const swept = this.sweeper.stop();
    const drainMs = opts.drainTimeoutMs ?? this.settings.drainTimeoutMs;
    // Offers end while the control stream is still read, so a handoff on its way still arrives.
    await this.offers?.stop(OFFER_HANDOFF_WAIT_MS);
    await Promise.allSettled([this.reader?.stop(), this.loopsSettled, swept]);
    await this.offers?.recoverRest();
    await this.scheduler.releaseBuffered();

    const { running, finalizing } = this.scheduler;
    const settled = () => Promise.allSettled([...running.values(), ...finalizing.values()].map((r) => r.done));
    if (running.size + finalizing.size > 0) await Promise.race([settled(), sleep(drainMs)]);
    if (running.size > 0) {
      this.log.warn({ inFlight: running.size }, 'drain timeout: aborting in-flight handlers');
      for (const r of running.values()) r.abort('shutdown');
      await Promise.race([settled(), sleep(Math.min(this.settings.abortGraceMs, 5_000))]);
      for (const r of running.values()) r.abandon();
      await settled();
    }
    await this.scheduler.lateReleasesSettled();
    clearInterval(this.clock);
    await this.registration.stop();
    await this.releaseFiring?.();
    this.state = 'stopped';
    this.log.info({ counters: this.counters }, 'consumer stopped');
  }

  /**
   * Settles when the consumer's loops end: after stop() normally. Ending (or
   * rejecting) while still running means the consumer crashed; a supervisor
   * stops it and starts a new one.
   */
  whenLoopsEnd(): Promise<void> {
    return this.loopsSettled;
  }

  /** Claim now (used by wake-ups, control messages and tests). */
  kick(): void {
    this.scheduler.kick();
  }

  private get active(): boolean {
    return this.state === 'running';
  }

  /** One sweep's housekeeping: expired leases and due probes of this queue back to pending (each announced), idle wake entries taken over. */
  private async housekeeping(signal: SweepSignal | undefined): Promise<void> {
    // The ledger holds the paused flag: each sweep learns it, also with Redis down (the control stream only says it sooner).
    await this.flags.learn(signal);
    if (this.maintainer) {
      // The pass runs only the steps the signal, when given, says have work.
      const failed = (await this.maintainer.pass(signal ? new Map([[signal.queue, signal]]) : undefined)).failed[0];
      if (failed) throw failed.error;
    }
    await this.reader?.takeOverIdle();
  }

  private async publishFollowUp(): Promise<void> {
    if (!this.wake || !this.redisConnected) return;
    const now = Date.now();
    if (now - this.lastFollowUpAt < FOLLOW_UP_MIN_INTERVAL_MS) return;
    this.lastFollowUpAt = now;
    this.counters.followUpWakes++;
    const queueClass = this.settings.classes[0] ?? 'default';
    await this.wake.publish([{ queue: this.settings.queue, queueClass, kind: 'advance', ids: [] }]);
  }

  private takeControl(m: ControlMessage): void {
    if (m.type === 'handoff') {
      // To one consumer of the queue; the others ignore it.
      if (m.to === this.name) this.offers?.handOff(m);
      return;
    }
    if (m.type === 'dependency') {
      this.scheduler.takeWake({ ids: m.ids });
      this.kick();
    } else if (m.type === 'pause' || m.type === 'resume') {
      this.flags.heard(m.type === 'pause');
    } else if (m.type === 'cancel' && Array.isArray(m.ids)) {
      for (const id of m.ids) this.scheduler.takeCancel(id);
    }
    this.emit('control', m);
  }

  /** A producer in this process hands a wake-up over directly; taken only while a slot is free to claim with. */
  private readonly takeLocalWake = (m: WakeMessage): boolean => {
    if (!this.active || this.scheduler.isPaused || this.scheduler.freeSlots() <= 0) return false;
    this.counters.localWakes++;
    this.scheduler.takeWake(m);
    this.scheduler.kick();
    return true;
  };

  private schedulerHost(): SchedulerHost<DB> {
    return {
      coalesce: this.coalesce,
      runDeps: {
        ledger: this.ledger,
        renewals: new RenewalBatch(this.ledger),
        progress: new ProgressBatch(this.ledger),
        counted: (counter) => this.counters[counter]++,
        onStage: (item, stage, ms) => this.emit('stage', item, stage, ms),
        completer: new BatchCompleter(this.ledger, (wanted, keyed) =>
          this.flags.fair ? undefined : this.handovers.forSuccessors(wanted, keyed),
        ),
        settings: this.settings,
        handlers: this.handlers,
        outbox: this.outbox,
        log: this.log,
        unownedTypesSeen: new Set(),
        onDelayed: (it, delayMs) => {
          void this.wake?.scheduleTimers([
            {
              queue: it.queue,
              queueClass: it.queueClass,
              itemId: it.id,
              attempt: it.attempt,
              runAt: new Date(Date.now() + delayMs),
            },
          ]);
        },
      },
      emit: this.emit.bind(this) as SchedulerHost<DB>['emit'],
      held: this.handovers,
      ack: (entries) => void this.reader?.ack(entries),
      followUp: () => this.publishFollowUp(),
      fair: () => this.flags.fair,
      staleOnly: () => this.gate.reason() !== undefined,
      claimTimed: (ms) => this.gate.noteClaimMs(ms),
      roomChanged: () => {
        this.reader?.notify();
        this.offers?.look();
      },
    };
  }

  private handoverHost(): ConstructorParameters<typeof Handovers>[0] {
    const { leaseMs, classes } = this.settings;
    // A coalescing type's heads are taken only by claim rounds, which gather their groups.
    const coalescing = this.coalesce?.types ?? {};
    const types =
      this.coalesce === undefined ? this.settings.types : this.claimedTypes().filter((t) => !(t in coalescing));
    return {
      owner: this.name,
      leaseMs,
      classes,
      types,
      freeSlots: () => this.scheduler.freeSlots(),
      claimRoom: () => this.scheduler.claimRoom(),
      claimRoomBesideRounds: () => this.scheduler.claimRoomBesideRounds(),
      takesOutsideRounds: () => this.claimsOutsideRounds(),
      handles: (wanted) => {
        for (const t of wanted)
          if (!this.handlers.has(t) || (types !== undefined && !types.includes(t)) || t in coalescing) return false;
        return true;
      },
      take: (items: readonly ClaimedItem[], claimedAtMs: number, way: HandoverWay) => {
        this.counters[HANDOVER_COUNTER[way]] += items.length;
        this.scheduler.admit(items, claimedAtMs);
      },
      roomChanged: () => this.scheduler.roomReturned(),
    };
  }

  private offerDeskHost(): OfferDeskHost {
    const { queue, classes, leaseMs } = this.settings;
    return {
      name: this.name,
      queue,
      classes,
      leaseMs,
      offerTypes: () => {
        const coalescing = this.coalesce?.types ?? {};
        const types = this.claimedTypes().filter((t) => !(t in coalescing));
        return types.length > 0 && types.length <= MAX_OFFER_TYPES ? types : undefined;
      },
      mayTakeOutsideRounds: () => this.claimsOutsideRounds(),
      freeSlots: () => this.scheduler.freeSlots(),
      caughtUp: () => this.scheduler.caughtUp(),
      activity: () => this.counters.claimed,
      heldUnderLease: (token) => this.ledger.heldUnderLease({ queue, classes, owner: this.name, token, leaseMs }),
      counted: (counter, n) => (this.counters[counter] += n),
      log: this.log,
    };
  }

  /**
   * Items claimed for this consumer outside its claim rounds (at insert, under
   * an offer, with a completion) are only for a running, unpaused consumer
   * whose claims are not fenced in SQL (fleet-wide cap, ownership epoch).
   */
  private claimsOutsideRounds(): boolean {
    return (
      this.active &&
      !this.scheduler.isPaused &&
      this.settings.maxProcessing === undefined &&
      this.settings.epoch === undefined &&
      this.gate.reason() === undefined
    );
  }
}
