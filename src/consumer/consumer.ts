import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { ValidationError } from '../errors.js';
import { createLogger, type Logger } from '../log.js';
import { Producer } from '../producer/producer.js';
import type { Outbox, WorkflowPort } from './job-context.js';
import { StaleGate, type StaleOnlyReason } from './stale-gate.js';
import type { ControlMessage, WakeMessage } from '../wake/messages.js';
import { holdScheduleFiring } from '../schedules/firing.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import { WakeReader } from '../wake/wake-reader.js';
import { ClaimScheduler, type SchedulerParts } from './claim-scheduler.js';
import { FollowUps } from './follow-ups.js';
import { BatchCompleter } from './completer.js';
import { announceWakeRead, newConsumerCounters, type ConsumerCounters, type ConsumerEvents } from './counters.js';
import { coalesceClaimOf, type CoalesceClaim } from './coalescing.js';
import { Eligibility } from './eligibility.js';
import { drainSlots } from './drain.js';
import { Reservations } from './reservations.js';
import { startLeaseClock } from './lease-keeper.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { Ledger } from '../ledger/ledger.js';
import { OfferDesk } from './offer-desk.js';
import { QueueFlags } from './queue-flags.js';
import { consumerSettingsSchema, type ConsumerOptions, type ConsumerSettings, type LiveSettings } from './options.js';
import { retuneSettings } from './options.js';
import { ConsumerRegistration } from './registration.js';
import { ProgressBatch, RenewalBatch } from './renewals.js';
import { Sweeper } from './sweeper.js';
import { handlerTable } from './handler-table.js';
import type { RegisteredHandler } from './types.js';
import { loadOtel } from '../tracing/otel.js';

export type { ConsumerCounters, ConsumerEvents } from './counters.js';
export type { ConsumerOptions } from './options.js';

/** At stop, how long handoffs of offers producers took may still come before the ledger is asked for their items. */
const OFFER_HANDOFF_WAIT_MS = 300;

/**
 * One consumer per (process, queue), wiring its parts (docs/design/consumer.md): a
 * claim scheduler feeding `concurrency` executor slots through its intake
 * (intake.ts), a wake reader that tells it which items to claim,
 * reservations for items claimed for it elsewhere, offers, and a sweeper of
 * the ledger as the backstop (faster while Redis is away). It finishes only
 * through the ledger.
 */
export class Consumer<DB = Record<string, never>> extends EventEmitter<ConsumerEvents> {
  readonly settings: ConsumerSettings;
  readonly name: string;
  readonly counters: ConsumerCounters = newConsumerCounters();

  private readonly ledger: ConsumerLedger;
  private readonly wake: WakeChannel | undefined;
  /** Stops this process firing the ledger's schedules, if this consumer held it last (src/schedules/firing.ts). */
  private releaseFiring: (() => Promise<void>) | undefined;
  private readonly firingLedger: Ledger;
  private readonly outbox: Outbox;
  private readonly workflows: WorkflowPort;
  /** Whether claims take only rescued work now, and why (stale-gate.ts). */
  private readonly gate: StaleGate;
  private readonly handlers: Map<string, RegisteredHandler<DB>>;
  private readonly log: Logger;
  private readonly scheduler: ClaimScheduler<DB>;
  /** Room held for items claimed for it outside its claim rounds: at insert, under an offer, as a successor. */
  private readonly reservations: Reservations;
  private readonly eligible: Eligibility;
  private readonly sweeper: Sweeper;
  private reader: WakeReader | undefined;
  private loopsSettled: Promise<void> = Promise.resolve();
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  /** The queue's flags: the one home of paused, stale-only and fair in this consumer. */
  private readonly flags: QueueFlags;
  private unregisterLocal: (() => void) | undefined;
  /** Its row in the ledger's registry of live consumers. */
  private readonly registration: ConsumerRegistration;
  /** One clock for every running item's lease renewal and long deadline. */
  private clock: NodeJS.Timeout | undefined;
  /** Its offers to producers in any process (with a wake channel). */
  private readonly offers: OfferDesk | undefined;
  /** What its claims coalesce (docs/design/batches-and-steps.md, Coalescing); undefined when no handler does. */
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
    this.workflows = {
      add: (trx, input, parentItem) => outboxProducer.workflowWithin(trx, input, parentItem),
      dependencies: (itemId, page) => ledger.workflows.dependencies(itemId, page),
    };
    this.handlers = handlerTable(handlers, ledger);
    this.coalesce = coalesceClaimOf(this.handlers);
    this.name = this.settings.name ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.log = (logger ?? createLogger('lanewake.consumer')).child({ queue: this.settings.queue, consumer: this.name });
    this.gate = StaleGate.of(this.settings, () => ledger.pool);
    this.flags = new QueueFlags(this.settings.queue, ledger, this.log, this.gate);
    this.eligible = new Eligibility(this.settings, this.handlers, this.coalesce, this.flags, this.gate);
    const { name, settings: s, counters, log, flags, gate } = this;
    this.scheduler = new ClaimScheduler({
      ledger,
      settings: s,
      name,
      counters,
      log,
      flags,
      gate,
      events: this,
      run: this.runDeps(),
      coalesce: this.coalesce,
    });
    this.reservations = new Reservations(
      { name, leaseMs: s.leaseMs, classes: s.classes },
      this.eligible,
      this.scheduler,
    );
    this.sweeper = new Sweeper({ queue: s.queue, log, flags, claims: this.scheduler, counters }, ledger, {
      pollIntervalMs: s.pollIntervalMs,
      redisDownPollMs: s.redisDownPollMs,
      shared: !!wake,
      maintenance: s.maintenance,
      wake,
    });
    const desk = { name, settings: s, eligible: this.eligible, claims: this.scheduler, counters, ledger, log };
    this.offers = wake ? new OfferDesk(desk, this.reservations, wake.offers) : undefined;
    // A pause returns what waits unstarted and withdraws the offers; a resume claims.
    flags.onPauseChanged((paused) => {
      this.scheduler.pauseChanged(paused);
      if (paused) this.offers?.look();
    });
    this.registration = ConsumerRegistration.of(ledger, name, s, log, () => gate.reason());
  }

  /** Items this consumer holds: handlers running plus outcomes being written. */
  get inFlight(): number {
    return this.scheduler.running.size + this.scheduler.finishing.size;
  }

  /** The latest numeric ctx.progress of each running item that reported one (the metrics' progress gauge). */
  get progressOfRunning(): { type: string; percent: number }[] {
    const out: { type: string; percent: number }[] = [];
    for (const run of this.scheduler.running.values())
      if (run.progressPercent !== undefined) out.push({ type: run.item.type, percent: run.progressPercent });
    return out;
  }

  get redisConnected(): boolean {
    return this.reader?.redisUp === true;
  }

  /**
   * Why it claims only rescued work now (docs/design/consumer.md, "Stale-only
   * claims"): its queue is stale-only in the ledger, its own option, its
   * pool saturated or its claims slow; undefined while it claims as usual.
   */
  get staleOnly(): StaleOnlyReason | undefined {
    return this.gate.reason();
  }

  /** Its queue is paused (Ledger.pause), as this consumer last heard: it claims nothing. */
  get paused(): boolean {
    return this.flags.paused;
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
    this.eligible.setRunning(true);
    await this.registration.start();
    this.scheduler.start();
    // Any process running a consumer fires the ledger's due schedules (one firer per ledger and process).
    this.releaseFiring = holdScheduleFiring({ ledger: this.firingLedger, wake: this.wake, log: this.log });
    if (this.wake) {
      const wake = this.wake;
      const { queue, classes, readBlockMs } = this.settings;
      this.reader = new WakeReader(
        wake,
        { queue, classes, readBlockMs, log: this.log },
        {
          readRoom: () => (this.flags.paused ? 0 : this.scheduler.intake.capacity.freeSlots()),
          onEntries: (entries) => {
            announceWakeRead(this, queue, this.name, entries);
            this.scheduler.takeEntries(entries);
          },
          onControl: (message) => this.takeControl(message),
          onRedisHealth: (up) => this.sweeper.redisHealth(up),
        },
      );
      const followUps = new FollowUps(wake, this.reader, this.settings, this.counters);
      this.scheduler.connect({ reader: this.reader, offers: this.offers, followUps });
      // Joins the group before the first claim, so no wake-up published from here on is missed.
      await this.reader.start();
      // Any process with a consumer runs the timer processor (due timers publish wake-ups). The
      // channel's owner starts it (the supervisor does); if nobody did, it starts here.
      if (!wake.timersStarted) wake.startTimers();
      this.unregisterLocal = wake.local.register({
        queue,
        classes,
        takeWake: this.takeLocalWake,
        atInsert: (queueClass, types, n) => this.reservations.atInsert(queueClass, types, n),
      });
      this.offers?.start();
    }
    this.sweeper.start(this.reader);
    this.clock = startLeaseClock(() => this.scheduler.running.values(), this.settings.leaseMs);
    this.loopsSettled = this.scheduler.loop();
    this.loopsSettled.catch(() => undefined);
    this.log.info({ concurrency: this.settings.concurrency, wake: this.wake !== undefined }, 'consumer started');
  }

  /**
   * Graceful stop (docs/design/consumer.md): stop claiming and reading; let in-flight
   * handlers finish within `drainTimeoutMs` (default: the setting); then abort them and finish
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
    this.eligible.setRunning(false);
    this.scheduler.stopClaiming();
    this.unregisterLocal?.();
    const swept = this.sweeper.stop();
    const drainMs = opts.drainTimeoutMs ?? this.settings.drainTimeoutMs;
    // Offers end while the control stream is still read, so a handoff on its way still arrives.
    await this.offers?.stop(OFFER_HANDOFF_WAIT_MS);
    await Promise.allSettled([this.reader?.stop(), this.loopsSettled, swept]);
    await this.offers?.recoverRest();
    await this.scheduler.intake.returnBuffered();
    await drainSlots(this.scheduler, drainMs, Math.min(this.settings.abortGraceMs, 5_000), this.log);
    await this.scheduler.intake.lateReturnsSettled();
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

  /** Slots and the fleet cap changed while it runs (a supervisor's reconcile): room is recounted, a claim looks. */
  retune(live: LiveSettings): void {
    retuneSettings(this.settings, live);
    this.scheduler.intake.retune(this.settings);
    this.scheduler.roomReturned();
  }

  private get active(): boolean {
    return this.state === 'running';
  }

  private takeControl(m: ControlMessage): void {
    if (m.type === 'handoff') {
      // To one consumer of the queue; the others ignore it.
      if (m.to === this.name) this.offers?.handOff(m);
      return;
    }
    if (m.type === 'dependency') {
      this.scheduler.takeWake({ ids: m.ids }, 'round');
      this.kick();
    } else if (m.type === 'pause' || m.type === 'resume') {
      this.flags.heard(m.type === 'pause');
    } else if (m.type === 'cancel' && Array.isArray(m.ids)) {
      for (const id of m.ids) this.scheduler.takeCancel(id);
    }
    this.emit('control', m);
  }

  /** A producer in this process passes a wake-up directly; taken only while a slot is free to claim with. */
  private readonly takeLocalWake = (m: WakeMessage): boolean => {
    if (!this.active || this.flags.paused || this.scheduler.intake.capacity.freeSlots() <= 0) return false;
    this.counters.localWakes++;
    this.scheduler.takeWake(m, 'wake');
    this.scheduler.kick();
    return true;
  };

  /** What each job's run works with. */
  private runDeps(): SchedulerParts<DB>['run'] {
    return {
      ledger: this.ledger,
      renewals: new RenewalBatch(this.ledger),
      progress: new ProgressBatch(this.ledger),
      counted: (counter) => this.counters[counter]++,
      onStage: (item, stage, ms) => this.emit('stage', item, stage, ms),
      // A fair queue's completions claim no successors (queue-flags.ts).
      completer: new BatchCompleter(this.ledger, (wanted, keyed) =>
        this.flags.fair ? undefined : this.reservations.forSuccessors(wanted, keyed),
      ),
      settings: this.settings,
      handlers: this.handlers,
      outbox: this.outbox,
      workflows: this.workflows,
      log: this.log,
      unownedTypesSeen: new Set(),
      onDelayed: (it, delayMs) => {
        const runAt = new Date(Date.now() + delayMs);
        void this.wake?.scheduleTimers([
          { queue: it.queue, queueClass: it.queueClass, itemId: it.id, attempt: it.attempt, runAt },
        ]);
      },
    };
  }
}
