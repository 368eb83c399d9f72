import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { ValidationError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import { newLeaseToken } from '../ledger/ids.js';
import type { ClaimedItem, QueueClass, SweepSignal } from '../ledger/types.js';
import { createLogger, type Logger } from '../log.js';
import { Maintainer } from '../maintenance/maintainer.js';
import { sleep } from '../sleep.js';
import type { ControlMessage } from '../wake/control.js';
import type { DirectReservation } from '../wake/local-route.js';
import type { WakeMessage } from '../wake/streams.js';
import type { ScheduledEnqueue } from '../wake/timers.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import { decodeHandedOver } from '../wake/offers.js';
import { WakeReader } from '../wake/wake-reader.js';
import { ClaimScheduler, type SchedulerHost } from './claim-scheduler.js';
import { BatchCompleter, type SuccessorLease } from './completer.js';
import { newConsumerCounters, type ConsumerCounters, type ConsumerEvents } from './counters.js';
import { leaseTickMs } from './lease-keeper.js';
import type { ConsumerLedger } from './ledger-port.js';
import { OfferDesk } from './offer-desk.js';
import { consumerSettingsSchema, type ConsumerSettings, type ConsumerSettingsInput } from './options.js';
import { sweepGroupOf, type SweepGroup, type SweepMember } from './sweep-group.js';
import { normalizeHandler, type HandlerEntry, type RegisteredHandler } from './types.js';

export type { ConsumerCounters, ConsumerEvents } from './counters.js';

export interface ConsumerOptions<DB = Record<string, never>> extends ConsumerSettingsInput {
  ledger: Ledger;
  /** Without it the consumer only sweeps the ledger (every pollIntervalMs). */
  wake?: WakeChannel | undefined;
  handlers: Record<string, HandlerEntry<DB>>;
  logger?: Logger;
  /**
   * How a recurring schedule's fire is enqueued if this consumer starts the
   * wake channel's timer processor (nobody else did), e.g. a Producer's
   * enqueue. Default: through the ledger, then a wake-up.
   */
  enqueueScheduled?: ScheduledEnqueue | undefined;
}

const FOLLOW_UP_MIN_INTERVAL_MS = 20;
/** At stop, how long handoffs of offers producers took may still come before the ledger is asked for their items. */
const OFFER_HANDOFF_WAIT_MS = 300;
/** A consumer with handlers for more types than this makes no offers (each offer lists them). */
const MAX_OFFER_TYPES = 32;
/** While the shared sweep covers a consumer (Redis up), its own sweep timer waits this long: the group's interval drives it. */
const SHARED_SWEEP_OWN_INTERVAL_MS = 3_600_000;
/** Most expired leases reclaimed, and most due probes released, per sweep. */
const SWEEP_MAINTENANCE_BATCH = 500;

/**
 * One consumer per (process, queue): a claim scheduler feeding `concurrency`
 * executor slots (docs/design.md §6), a wake reader that tells it which items
 * to claim, and a sweep of the ledger as the backstop (faster while Redis is
 * away). It finalizes only through the ledger.
 */
export class Consumer<DB = Record<string, never>> extends EventEmitter<ConsumerEvents> {
  readonly settings: ConsumerSettings;
  readonly name: string;
  readonly counters: ConsumerCounters = newConsumerCounters();

  private readonly ledger: ConsumerLedger;
  private readonly wake: WakeChannel | undefined;
  private readonly enqueueScheduled: ScheduledEnqueue | undefined;
  private readonly handlers: Map<string, RegisteredHandler<DB>>;
  private readonly log: Logger;
  private readonly scheduler: ClaimScheduler<DB>;
  private reader: WakeReader | undefined;
  private loopsSettled: Promise<void> = Promise.resolve();
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  private lastFollowUpAt = 0;
  /** The sweep's share of the ledger's housekeeping for this queue (`maintenance` on). */
  private readonly maintainer: Maintainer | undefined;
  /** Sweeps in a row whose maintenance failed (logged once, at the first). */
  private sweepFailures = 0;
  private unregisterLocal: (() => void) | undefined;
  /** One clock for every running item's lease renewal and long deadline. */
  private clock: NodeJS.Timeout | undefined;
  /** The process's shared sweep for this ledger and interval, while this consumer reads wake-ups. */
  private sweepGroup: SweepGroup | undefined;
  private readonly sweepMember: SweepMember;
  /** Its offers to producers in any process (with a wake channel). */
  private readonly offers: OfferDesk | undefined;

  constructor(options: ConsumerOptions<DB>) {
    super();
    const { ledger, wake, handlers, logger, enqueueScheduled, ...settings } = options;
    const parsed = consumerSettingsSchema.safeParse(settings);
    if (!parsed.success) throw ValidationError.fromZod(parsed.error, 'consumer options');
    if (typeof handlers !== 'object' || handlers === null || Object.keys(handlers).length === 0) {
      throw new ValidationError([{ field: 'handlers', message: 'must map at least one type to a handler' }], 'consumer options');
    }
    this.settings = parsed.data;
    this.ledger = ledger;
    this.wake = wake;
    this.enqueueScheduled = enqueueScheduled ?? wake?.enqueueThrough(ledger);
    this.handlers = new Map(Object.entries(handlers).map(([type, h]) => [type, normalizeHandler(h)]));
    this.name = this.settings.name ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.log = (logger ?? createLogger('lanewake.consumer')).child({ queue: this.settings.queue, consumer: this.name });
    this.maintainer = this.settings.maintenance
      ? new Maintainer({ ledger, wake, queues: [this.settings.queue], log: this.log, batchSize: SWEEP_MAINTENANCE_BATCH })
      : undefined;
    this.sweepMember = { queue: this.settings.queue, sweep: (signal) => this.sharedSweep(signal) };
    this.scheduler = new ClaimScheduler(this.ledger, this.settings, this.name, this.counters, this.log, {
      runDeps: {
        ledger: this.ledger,
        completer: new BatchCompleter(this.ledger, this.successorLease),
        settings: this.settings,
        handlers: this.handlers,
        log: this.log,
        unownedTypesSeen: new Set(),
        onDelayed: (it, delayMs) => {
          void this.wake?.scheduleTimers([
            { queue: it.queue, queueClass: it.queueClass, itemId: it.id, attempt: it.attempt, runAt: new Date(Date.now() + delayMs) },
          ]);
        },
      },
      emit: this.emit.bind(this) as SchedulerHost<DB>['emit'],
      sweep: () => this.sweep(),
      sweepIntervalMs: () => this.sweepIntervalMs(),
      ack: (entries) => void this.reader?.ack(entries),
      followUp: () => this.publishFollowUp(),
      roomChanged: () => {
        this.reader?.notify();
        this.offers?.look();
      },
    });
    this.offers = wake ? new OfferDesk(this.offerDeskHost(), wake) : undefined;
  }

  /** Items this consumer holds: handlers running plus outcomes being written. */
  get inFlight(): number {
    return this.scheduler.running.size + this.scheduler.finalizing.size;
  }

  get redisConnected(): boolean {
    return this.reader !== undefined && this.reader.redisUp;
  }

  async start(): Promise<void> {
    if (this.state !== 'new') throw new Error(`consumer already ${this.state}`);
    await this.ledger.assertSchemaCurrent();
    this.state = 'running';
    this.scheduler.active = true;
    const loops: Promise<void>[] = [];
    if (this.wake) {
      const wake = this.wake;
      const { queue, classes, readBlockMs } = this.settings;
      this.reader = new WakeReader(wake, { queue, classes, name: this.name, readBlockMs, log: this.log }, {
        readRoom: () => (this.scheduler.paused ? 0 : this.scheduler.freeSlots()),
        onEntries: (entries) => {
          if (this.listenerCount('wakeRead') > 0) this.emit('wakeRead', { ids: entries.flatMap((e) => e.ids), entries: entries.length });
          this.scheduler.takeEntries(entries);
        },
        onControl: (message) => this.takeControl(message),
        onRedisHealth: (up) => (up ? this.scheduler.sweepNow() : this.scheduler.wakeLoop()),
      });
      // Joins the group before the first claim, so no wake-up published from here on is missed.
      await this.reader.start();
      // Any process with a consumer runs the timer processor (due timers publish wake-ups, schedule
      // fires enqueue one item per fire time, whichever replica wins). The channel's owner starts it
      // (the supervisor does); if nobody did, it starts here.
      if (!wake.timersStarted && this.enqueueScheduled) wake.startTimers(this.enqueueScheduled);
      this.unregisterLocal = wake.registerLocal({ queue, classes, offer: this.offerLocal, reserve: this.reserveDirect });
      this.offers?.start();
      this.sweepGroup = sweepGroupOf(this.ledger, this.settings.pollIntervalMs);
      this.sweepGroup.join(this.sweepMember);
    }
    this.clock = setInterval(() => {
      const now = Date.now();
      for (const run of this.scheduler.running.values()) run.tick(now);
    }, leaseTickMs(this.settings.leaseMs));
    this.clock.unref();
    loops.push(this.scheduler.loop());
    this.loopsSettled = Promise.all(loops).then(() => undefined);
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
    this.scheduler.active = false;
    this.unregisterLocal?.();
    this.sweepGroup?.leave(this.sweepMember);
    const drainMs = opts.drainTimeoutMs ?? this.settings.drainTimeoutMs;
    this.scheduler.notify();
    // Offers end while the control stream is still read, so a handoff on its way still arrives.
    await this.offers?.stop(OFFER_HANDOFF_WAIT_MS);
    await Promise.allSettled([this.reader?.stop(), this.loopsSettled]);
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

  /** Without Redis its own sweep is the consumer's only way to find work; with it, the shared sweep's interval drives. */
  private sweepIntervalMs(): number {
    const { pollIntervalMs, redisDownPollMs } = this.settings;
    if (!this.reader) return pollIntervalMs;
    if (this.reader.redisUp) return this.sweepGroup ? SHARED_SWEEP_OWN_INTERVAL_MS : pollIntervalMs;
    return Math.min(redisDownPollMs, pollIntervalMs);
  }

  /** This consumer's share of the process's shared sweep: a claim only if the ledger has claimable heads for it. */
  private async sharedSweep(signal: SweepSignal | undefined): Promise<void> {
    if (!this.active) return;
    // While Redis is away the consumer's own, faster sweep runs instead.
    if (this.reader && !this.reader.redisUp) return;
    await this.scheduler.sharedSweep(signal === undefined || signal.claimable || signal.expiredLeases || signal.dueProbes, () => this.sweep(signal));
  }

  /** The backstop: the ledger is the truth, so a sweep finds whatever wake-ups missed. */
  private async sweep(signal?: SweepSignal): Promise<void> {
    try {
      if (this.maintainer) {
        // Expired leases and due probes of this queue back to pending, each announced with a wake-up
        // (the pass runs only the steps the signal, when given, says have work).
        const failed = (await this.maintainer.pass(signal ? new Map([[signal.queue, signal]]) : undefined)).failed[0];
        if (failed) throw failed.error;
      }
      await this.reader?.takeOverIdle();
      if (this.sweepFailures > 0) {
        this.log.warn({ failedSweeps: this.sweepFailures }, 'sweep maintenance works again');
        this.sweepFailures = 0;
      }
    } catch (error) {
      this.counters.errors++;
      // One line when it starts failing (Redis or the ledger away), one when it works again: not one per sweep.
      if (this.sweepFailures++ === 0) this.log.warn({ err: (error as Error).message }, 'sweep maintenance failed; retried every sweep, further failures counted');
    }
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
      // To one consumer of the queue; the others ignore it. Undecodable: the desk finds the items in the ledger.
      if (m.to !== this.name) return;
      const items = decodeHandedOver(m.items);
      if (!items) return;
      if (items.length >= m.count) this.offers?.handOff(m.token, items);
      else void this.offers?.handOffFromLedger(m.token);
      return;
    }
    if (m.type === 'dependency') {
      this.scheduler.takeWake({ ids: m.ids });
      this.kick();
    } else if (m.type === 'pause') {
      this.scheduler.paused = true;
      this.offers?.look();
    } else if (m.type === 'resume') {
      this.scheduler.paused = false;
      this.kick();
    } else if (m.type === 'cancel' && Array.isArray(m.ids)) {
      for (const id of m.ids) this.scheduler.takeCancel(id);
    }
    this.emit('control', m);
  }

  /** A producer in this process hands a wake-up over directly; taken only while a slot is free to claim with. */
  private readonly offerLocal = (m: WakeMessage): boolean => {
    if (!this.active || this.scheduler.paused || this.scheduler.freeSlots() <= 0) return false;
    this.counters.localWakes++;
    this.scheduler.takeWake(m);
    this.scheduler.kick();
    return true;
  };

  /**
   * A producer in this process is about to insert items already claimed for
   * this consumer: hold free slots for them. Only for plain claims (no
   * fleet-wide cap, no ownership epoch: those fence claims in SQL) and only
   * for types this consumer has handlers for.
   */
  private readonly reserveDirect = (queueClass: QueueClass, types: ReadonlySet<string>, n: number): DirectReservation | undefined => {
    if (!this.claimsOutsideRounds()) return undefined;
    if (!this.settings.classes.includes(queueClass)) return undefined;
    for (const t of types) {
      if (!this.handlers.has(t) || (this.settings.types !== undefined && !this.settings.types.includes(t))) return undefined;
    }
    const held = this.scheduler.holdSlots(n);
    if (held <= 0) return undefined;
    const reservedAtMs = Date.now();
    let open = true;
    const close = (): void => {
      if (!open) return;
      open = false;
      this.scheduler.unholdSlots(held);
    };
    return {
      lease: { owner: this.name, token: newLeaseToken(), leaseMs: this.settings.leaseMs, max: held },
      accept: (items) => {
        close();
        this.counters.claimedAtInsert += items.length;
        // The lease runs from before the insert: the keeper renews no later than it must.
        this.scheduler.takeHandedOver(items, reservedAtMs);
      },
      cancel: close,
    };
  };

  private offerDeskHost(): ConstructorParameters<typeof OfferDesk>[0] {
    const { queue, classes, leaseMs } = this.settings;
    return {
      name: this.name,
      queue,
      classes,
      leaseMs,
      offerTypes: () => {
        const types = [...this.handlers.keys()].filter((t) => this.settings.types === undefined || this.settings.types.includes(t));
        return types.length <= MAX_OFFER_TYPES ? types : undefined;
      },
      mayTakeOutsideRounds: () => this.claimsOutsideRounds(),
      freeSlots: () => this.scheduler.freeSlots(),
      caughtUp: () => this.scheduler.caughtUp(),
      holdSlots: (n) => this.scheduler.holdSlots(n),
      unholdSlots: (n) => this.scheduler.unholdSlots(n),
      activity: () => this.counters.claimed,
      takeHandedOver: (items, claimedAtMs) => {
        this.counters.handedOver += items.length;
        this.scheduler.takeHandedOver(items, claimedAtMs);
      },
      heldUnderLease: (token) => this.ledger.heldUnderLease({ queue, classes, owner: this.name, token, leaseMs }),
      counted: (counter, n) => (this.counters[counter] += n),
      log: this.log,
    };
  }

  /**
   * Lane affinity (docs/design.md §6): a completion batch that finishes lane heads
   * claims their successors in its own transaction, into room this consumer
   * has now (free slots and prefetch room not promised to a claim round).
   */
  private readonly successorLease = (wanted: number): SuccessorLease | undefined => {
    if (!this.claimsOutsideRounds()) return undefined;
    const room = this.scheduler.reserveRoom(wanted);
    if (room <= 0) return undefined;
    const claimedAtMs = Date.now();
    const { leaseMs, classes, types } = this.settings;
    return {
      claim: { owner: this.name, token: newLeaseToken(), leaseMs, max: room, classes, ...(types ? { types } : {}) },
      accept: (items: readonly ClaimedItem[]) => {
        this.scheduler.returnRoom(room);
        this.counters.claimedWithCompletion += items.length;
        this.scheduler.takeHandedOver(items, claimedAtMs);
      },
    };
  };

  /**
   * Items claimed for this consumer outside its claim rounds (at insert, with
   * a completion) are only for a running, unpaused consumer whose claims are
   * not fenced in SQL (fleet-wide cap, ownership epoch).
   */
  private claimsOutsideRounds(): boolean {
    return this.active && !this.scheduler.paused && this.settings.maxProcessing === undefined && this.settings.epoch === undefined;
  }
}

