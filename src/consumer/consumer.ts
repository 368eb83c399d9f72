import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { ValidationError } from '../errors.js';
import { MAX_CLAIM_ITEMS, type Ledger } from '../ledger/ledger.js';
import { newLeaseToken } from '../ledger/ids.js';
import type { ClaimedItem, QueueClass } from '../ledger/types.js';
import { createLogger, type Logger } from '../log.js';
import type { WakeEntry, WakeMessage, WakeStreams } from '../wake/streams.js';
import type { ControlMessage } from '../wake/control.js';
import { createRedisClient, whenReady } from '../wake/redis.js';
import type { DirectReservation } from '../wake/local-route.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import type { ScheduledEnqueue } from '../wake/timers.js';
import { Maintainer } from '../maintenance/maintainer.js';
import { BatchCompleter, type SuccessorLease } from './completer.js';
import { runJob, type ExecutorDeps, type Outcome, type RunningJob } from './executor.js';
import { leaseTickMs } from './lease-keeper.js';
import { sleep } from '../sleep.js';
import { Latch } from './latch.js';
import { consumerSettingsSchema, type ConsumerSettings, type ConsumerSettingsInput } from './options.js';
import { normalizeHandler, type HandlerEntry, type RegisteredHandler } from './types.js';

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

export interface ConsumerCounters {
  claimed: number;
  completed: number;
  retried: number;
  dead: number;
  released: number;
  blocked: number;
  cancelled: number;
  skipped: number;
  leaseLost: number;
  abandoned: number;
  claimRounds: number;
  sweeps: number;
  wakeEntriesRead: number;
  /** Wake-ups a producer in this process handed over directly (no Redis round trip). */
  localWakes: number;
  /** Items a producer in this process inserted already claimed for this consumer (no claim round trip). */
  claimedAtInsert: number;
  /** Lane successors claimed in the transaction that completed their predecessors (lane affinity, no claim round). */
  claimedWithCompletion: number;
  followUpWakes: number;
  /** Prefetched items handed back unstarted (their wait in the buffer ran too long, or the consumer stopped). */
  prefetchReleased: number;
  errors: number;
}

export interface ConsumerEvents {
  outcome: [item: ClaimedItem, outcome: Outcome];
  started: [item: ClaimedItem];
  control: [message: ControlMessage];
  /** One claim round: how many items it won and how long its ledger round trips took. */
  claimRound: [round: { claimed: number; durationMs: number; targeted: number }];
}

const FOLLOW_UP_MIN_INTERVAL_MS = 20;
const IDLE_WAKE_ENTRY_MS = 30_000;
const CAPPED_RETRY_MS = 250;
/** Claim rounds one scheduler may have in flight at once. */
const MAX_CLAIM_ROUNDS = 2;
/** The prefetch buffer aims to hold what the slots will start within this long, given recent handler times. */
const PREFETCH_HORIZON_MS = 250;
/** Handler times are floored at this (a no-op takes microseconds), so the buffer size stays finite. */
const MIN_HANDLER_MS = 0.01;
/** Weight of the newest handler time in the moving average. */
const HANDLER_MS_WEIGHT = 0.1;
/** A signal that came after a round's head search is followed up this much later. */
const LOOK_AGAIN_MS = 5;
/** Most expired leases reclaimed, and most due probes released, per sweep. */
const SWEEP_MAINTENANCE_BATCH = 500;

interface Prefetched {
  item: ClaimedItem;
  claimedAtMs: number;
}

/**
 * One claim scheduler per (process, queue) feeding `concurrency` executor
 * slots (docs/design.md §6). It claims in batches sized to the free slots, reads
 * wake-ups only while it has free slots, sweeps the ledger as a backstop
 * (faster while Redis is away) and finalizes only through the ledger.
 */
export class Consumer<DB = Record<string, never>> extends EventEmitter<ConsumerEvents> {
  readonly settings: ConsumerSettings;
  readonly name: string;
  readonly counters: ConsumerCounters = {
    claimed: 0, completed: 0, retried: 0, dead: 0, released: 0, blocked: 0, cancelled: 0, skipped: 0,
    leaseLost: 0, abandoned: 0, claimRounds: 0, sweeps: 0, wakeEntriesRead: 0, localWakes: 0, claimedAtInsert: 0, claimedWithCompletion: 0, followUpWakes: 0, prefetchReleased: 0, errors: 0,
  };

  private readonly ledger: Ledger;
  private readonly wake: WakeChannel | undefined;
  private readonly enqueueScheduled: ScheduledEnqueue | undefined;
  private readonly handlers: Map<string, RegisteredHandler<DB>>;
  private readonly log: Logger;
  private readonly completer: BatchCompleter;
  /** Items whose handler is running: each holds an executor slot. */
  private readonly running = new Map<string, RunningJob>();
  /** Items whose handler has settled and whose outcome is being written. */
  private readonly finalizing = new Map<string, RunningJob>();
  /** Claimed, not yet started: each waits for a slot (docs/design.md, Prefetch), oldest first. */
  private readonly prefetched: Prefetched[] = [];
  /** How long handlers have recently taken (ms, moving average): how fast a slot frees up. */
  private handlerMs: number | undefined;
  private readonly prefetchLimit: number;
  private readonly targeted = new Set<string>();
  /** Items in the prefetch buffer named by a cancel message: each asks the ledger as it starts. */
  private readonly cancelHints = new Set<string>();
  private pendingAcks: WakeEntry[] = [];
  private readonly schedulerWake = new Latch();
  private readonly readerWake = new Latch();
  private streams: WakeStreams | undefined;
  private reader: Redis | undefined;
  private controlReader: Redis | undefined;
  private loops: Promise<void>[] = [];
  private loopsSettled: Promise<void> = Promise.resolve();
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  private mightHaveWork = true;
  private readonly lateReleases = new Set<Promise<void>>();
  /** Slots held for items a producer in this process is inserting already claimed for us. */
  private directReserved = 0;
  /** Bumped by every noteWork(): a claim round must not forget a signal its head search did not see. */
  private workSignals = 0;
  private lookTimer: NodeJS.Timeout | undefined;
  private redisDown = false;
  private groupReady = false;
  private paused = false;
  private lastSweepAt = 0;
  private lastFollowUpAt = 0;
  /** Room promised to claim rounds in flight. */
  private reservedRoom = 0;
  /** The last claim round got all the room it asked for: worth a second round in parallel. */
  private lastRoundFull = false;
  private claimBackoffUntil = 0;
  private sweeping: Promise<void> | undefined;
  /** The sweep's share of the ledger's housekeeping for this queue (`maintenance` on). */
  private readonly maintainer: Maintainer | undefined;
  /** Sweeps in a row whose maintenance failed (logged once, at the first). */
  private sweepFailures = 0;
  /** The claim limiter found the fleet at its cap: no claim before this, unless one of ours finishes. */
  private cappedUntil = 0;
  private unregisterLocal: (() => void) | undefined;
  /** What every run of this consumer shares (one object, not one per item). */
  private readonly executorDeps: ExecutorDeps<DB>;
  /** One clock for every running item's lease renewal and long deadline. */
  private clock: NodeJS.Timeout | undefined;

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
    this.enqueueScheduled = enqueueScheduled;
    this.handlers = new Map(Object.entries(handlers).map(([type, h]) => [type, normalizeHandler(h)]));
    this.name = this.settings.name ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.log = (logger ?? createLogger('lanewake.consumer')).child({ queue: this.settings.queue, consumer: this.name });
    this.completer = new BatchCompleter(ledger, this.successorLease);
    this.executorDeps = {
      ledger,
      completer: this.completer,
      settings: this.settings,
      handlers: this.handlers,
      log: this.log,
      unownedTypesSeen: new Set(),
      onDelayed: (it, delayMs) => {
        void this.wake?.scheduleTimers([
          { queue: it.queue, queueClass: it.queueClass, itemId: it.id, attempt: it.attempt, runAt: new Date(Date.now() + delayMs) },
        ]);
      },
      // The slot frees when the handler settles, so the next claim overlaps this finalize.
      onSettled: (run) => {
        const ms = run.handlerMs;
        if (ms !== undefined) this.handlerMs = this.handlerMs === undefined ? ms : this.handlerMs + (ms - this.handlerMs) * HANDLER_MS_WEIGHT;
        if (this.running.delete(run.item.id)) this.finalizing.set(run.item.id, run);
        this.startPrefetched();
        this.schedulerWake.notify();
        this.readerWake.notify();
      },
    };
    this.maintainer = this.settings.maintenance
      ? new Maintainer({ ledger, wake, queues: [this.settings.queue], log: this.log, batchSize: SWEEP_MAINTENANCE_BATCH })
      : undefined;
    // A fleet-wide cap counts prefetched items as processing: keep the cap tight, no prefetch.
    this.prefetchLimit = this.settings.maxProcessing !== undefined ? 0 : this.settings.prefetch;
  }

  /** Items this consumer holds: handlers running plus outcomes being written. */
  get inFlight(): number {
    return this.running.size + this.finalizing.size;
  }

  get redisConnected(): boolean {
    return this.wake !== undefined && !this.redisDown;
  }

  async start(): Promise<void> {
    if (this.state !== 'new') throw new Error(`consumer already ${this.state}`);
    await this.ledger.assertSchemaCurrent();
    this.state = 'running';
    if (this.wake) {
      this.streams = this.wake.streamsOf(this.settings.queue, this.settings.classes);
      this.reader = createRedisClient(this.wake.options.redis, `lanewake:wake:${this.name}`);
      this.controlReader = createRedisClient(this.wake.options.redis, `lanewake:control:${this.name}`);
      // Join the group before the first claim so no wake-up published from here on is missed.
      if (await this.wake.usable()) {
        await this.streams.ensureGroup(this.wake.redis).then(
          () => (this.groupReady = true),
          () => undefined,
        );
      }
      const wake = this.wake;
      // Any process with a consumer runs the timer processor (due timers publish wake-ups, schedule
      // fires enqueue one item per fire time, whichever replica wins). The channel's owner starts it
      // (the supervisor does); if nobody did, it starts here.
      if (!wake.timersStarted) wake.startTimers(this.enqueueScheduled ?? wake.enqueueThrough(this.ledger));
      // Notice Redis coming back on the command connection at once, not at the next read.
      wake.redis.on('ready', this.onRedisReady);
      this.unregisterLocal = wake.registerLocal({
        queue: this.settings.queue,
        classes: this.settings.classes,
        offer: this.offerLocal,
        reserve: this.reserveDirect,
      });
      this.loops.push(this.readLoop(), this.controlLoop());
    }
    this.clock = setInterval(() => {
      const now = Date.now();
      for (const run of this.running.values()) run.tick(now);
    }, leaseTickMs(this.settings.leaseMs));
    this.clock.unref();
    this.loops.push(this.scheduleLoop());
    this.loopsSettled = Promise.all(this.loops).then(() => undefined);
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
    this.unregisterLocal?.();
    const drainMs = opts.drainTimeoutMs ?? this.settings.drainTimeoutMs;
    this.schedulerWake.notify();
    this.readerWake.notify();
    this.reader?.disconnect();
    this.controlReader?.disconnect();
    await Promise.allSettled(this.loops);
    await this.releasePrefetched(this.prefetched.splice(0), 'shutdown');

    const settled = () => Promise.allSettled([...this.running.values(), ...this.finalizing.values()].map((r) => r.done));
    if (this.running.size + this.finalizing.size > 0) await Promise.race([settled(), sleep(drainMs)]);
    if (this.running.size > 0) {
      this.log.warn({ inFlight: this.running.size }, 'drain timeout: aborting in-flight handlers');
      for (const r of this.running.values()) r.abort('shutdown');
      await Promise.race([settled(), sleep(Math.min(this.settings.abortGraceMs, 5_000))]);
      for (const r of this.running.values()) r.abandon();
      await settled();
    }
    await Promise.allSettled([...this.lateReleases]);
    clearInterval(this.clock);
    clearTimeout(this.lookTimer);
    if (this.wake && this.streams) {
      this.wake.redis.off('ready', this.onRedisReady);
      await this.streams.removeConsumer(this.wake.redis, this.name).catch(() => undefined);
    }
    this.state = 'stopped';
    this.log.info({ counters: this.counters }, 'consumer stopped');
  }

  private readonly onRedisReady = (): void => {
    if (!this.redisDown || !this.active) return;
    this.redisDown = false;
    // An emptied Redis lost the group: join it again before the next read.
    this.groupReady = false;
    this.log.info('redis is back: sweeping now, wake-ups resume');
    this.lastSweepAt = 0;
    this.kick();
  };

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
    this.noteWork();
    this.schedulerWake.notify();
  }

  private get active(): boolean {
    return this.state === 'running';
  }

  private freeSlots(): number {
    return this.settings.concurrency - this.running.size - this.directReserved;
  }

  /**
   * How many items a claim may take now: the free slots, plus a prefetch
   * buffer sized to what the slots will take within PREFETCH_HORIZON_MS,
   * given how long handlers recently took. Fast handlers get large claims
   * (fewer statements per item, claims overlapping execution); slow ones get
   * none, so a busy replica does not sit on work an idle one could run.
   * Handler time rather than a rate of starts or settles: slots filled
   * together settle together, and a burst reads as a rate it is not.
   */
  private claimRoom(): number {
    return this.freeSlots() + this.prefetchTarget() - this.prefetched.length;
  }

  private prefetchTarget(): number {
    if (this.handlerMs === undefined) return 0;
    const perSlot = PREFETCH_HORIZON_MS / Math.max(this.handlerMs, MIN_HANDLER_MS);
    return Math.min(this.prefetchLimit, Math.floor(this.settings.concurrency * perSlot));
  }

  /**
   * Starts prefetched items while slots are free. An item waits in the
   * buffer at most a third of its lease, then goes back unstarted. One that
   * finds a free slot starts while at least a third of its lease is left
   * (its first renewal is then due at once): a claim round slowed by a busy
   * database must not hand back what it just claimed for free slots.
   */
  private startPrefetched(): void {
    if (!this.active) return;
    const expired: Prefetched[] = [];
    const ttlMs = this.settings.leaseMs / 3;
    const startableMs = (this.settings.leaseMs * 2) / 3;
    while (this.freeSlots() > 0 && this.prefetched.length > 0) {
      const next = this.prefetched.shift()!;
      if (Date.now() - next.claimedAtMs > startableMs) expired.push(next);
      else this.startJob(next.item, next.claimedAtMs);
    }
    const now = Date.now();
    while (this.prefetched.length > 0 && now - this.prefetched[0]!.claimedAtMs > ttlMs) expired.push(this.prefetched.shift()!);
    if (expired.length > 0) void this.releasePrefetched(expired, 'prefetch wait exceeded a third of the lease');
  }

  /** Items handed to a consumer that has begun stopping go straight back; stop() waits for that. */
  private releaseLate(items: readonly ClaimedItem[], claimedAtMs: number): void {
    this.counters.claimed += items.length;
    const p = this.releasePrefetched(items.map((item) => ({ item, claimedAtMs })), 'consumer stopping');
    this.lateReleases.add(p);
    void p.finally(() => this.lateReleases.delete(p));
  }

  /** Hands unstarted items back without spending an attempt. */
  private async releasePrefetched(items: readonly Prefetched[], reason: string): Promise<void> {
    if (items.length === 0) return;
    this.counters.prefetchReleased += items.length;
    for (const p of items) this.cancelHints.delete(p.item.id);
    await Promise.allSettled(
      items.map((p) =>
        this.ledger.release(p.item, { reason }).catch((error: unknown) => {
          this.counters.errors++;
          this.log.warn({ id: p.item.id, err: (error as Error).message }, 'could not release a prefetched item; its lease will expire');
        }),
      ),
    );
    this.noteWork();
  }

  private sweepIntervalMs(): number {
    if (!this.wake) return this.settings.pollIntervalMs;
    return this.redisDown ? Math.min(this.settings.redisDownPollMs, this.settings.pollIntervalMs) : this.settings.pollIntervalMs;
  }

  /**
   * Claims run as rounds of a few statements each, most of the time waiting
   * on the ledger's commit. While the last round came back full (more work
   * than room), a second round may start before the first returns, each on
   * its own connection with its own share of the room, so the commit waits
   * overlap instead of adding up.
   */
  private async scheduleLoop(): Promise<void> {
    const rounds = new Set<Promise<void>>();
    while (this.active) {
      // The sweep's housekeeping runs beside the claims, so a wake-up never waits behind it.
      if (this.sweeping === undefined && Date.now() - this.lastSweepAt >= this.sweepIntervalMs()) {
        this.sweeping = this.sweep().finally(() => (this.sweeping = undefined));
      }
      this.startPrefetched();
      const room = Math.min(MAX_CLAIM_ITEMS, this.claimRoom() - this.reservedRoom);
      // A claim round costs about the same wait whatever its size: while the buffer
      // still holds work for the slots, let the room grow to half the buffer first.
      const worthARound = this.prefetched.length === 0 || room >= Math.ceil(this.prefetchTarget() / 2);
      // Rounds overlap while claims come back full, and for named ids (a wake-up
      // for new work must not wait behind a round looking for other heads).
      const maxRounds = this.settings.maxProcessing === undefined && (this.lastRoundFull || this.targeted.size > 0) ? MAX_CLAIM_ROUNDS : 1;
      const holdUntil = Math.max(this.claimBackoffUntil, this.cappedUntil);
      const backingOff = Date.now() < holdUntil;
      if (!this.paused && !backingOff && room > 0 && worthARound && rounds.size < maxRounds && (this.mightHaveWork || this.targeted.size > 0)) {
        this.reservedRoom += room;
        const round: Promise<void> = this.claimRound(room)
          .catch((error: unknown) => {
            this.counters.errors++;
            this.lastRoundFull = false;
            this.claimBackoffUntil = Date.now() + 500;
            this.log.error({ err: (error as Error).message }, 'claim failed; retrying');
          })
          .finally(() => {
            this.reservedRoom -= room;
            rounds.delete(round);
            this.schedulerWake.notify();
          });
        rounds.add(round);
        continue;
      }
      const untilSweep = this.sweepIntervalMs() - (Date.now() - this.lastSweepAt);
      const until = this.prefetched.length > 0 ? Math.min(untilSweep, this.settings.leaseMs / 6) : untilSweep;
      await this.schedulerWake.wait(Math.max(1, backingOff ? Math.min(until, holdUntil - Date.now()) : until));
    }
    await Promise.allSettled([...rounds, this.sweeping]);
  }

  /** The backstop: the ledger is the truth, so a sweep finds whatever wake-ups missed. */
  private async sweep(): Promise<void> {
    this.lastSweepAt = Date.now();
    this.counters.sweeps++;
    this.noteWork();
    try {
      if (this.maintainer) {
        // Expired leases and due probes of this queue back to pending, each announced with a wake-up.
        const failed = (await this.maintainer.pass()).failed[0];
        if (failed) throw failed.error;
      }
      if (this.wake && this.streams && !this.redisDown && this.groupReady) {
        const stale = await this.streams.reclaimIdle(this.wake.redis, this.name, IDLE_WAKE_ENTRY_MS, 100);
        this.takeEntries(stale);
      }
      if (this.sweepFailures > 0) {
        this.log.warn({ failedSweeps: this.sweepFailures }, 'sweep maintenance works again');
        this.sweepFailures = 0;
      }
    } catch (error) {
      this.counters.errors++;
      // One line when it starts failing (Redis or the ledger away), one when it works again: not one per sweep.
      if (this.sweepFailures++ === 0) this.log.warn({ err: (error as Error).message }, 'sweep maintenance failed; retried every sweep, further failures counted');
    }
    // What it reclaimed or woke is claimable now.
    this.noteWork();
    this.schedulerWake.notify();
  }

  /** Claimable heads may exist beyond any named ids: the next claim round looks. */
  private noteWork(): void {
    this.mightHaveWork = true;
    this.workSignals++;
  }

  private lookSoon(): void {
    if (this.lookTimer !== undefined) return;
    this.lookTimer = setTimeout(() => {
      this.lookTimer = undefined;
      if (!this.active) return;
      this.noteWork();
      this.schedulerWake.notify();
    }, LOOK_AGAIN_MS);
    this.lookTimer.unref();
  }

  private async claimRound(free: number): Promise<void> {
    this.counters.claimRounds++;
    /** Signals up to here are answered by this round's head search, if it makes one. */
    let seenSignals = this.workSignals;
    const startedAt = performance.now();
    const acks = this.pendingAcks;
    this.pendingAcks = [];
    const named = [...this.targeted];
    const ids = named.slice(0, free);
    this.targeted.clear();
    // Named items beyond this round's room are dropped as hints: a general claim finds them.
    let lookFurther = this.mightHaveWork || named.length > ids.length;
    const base = { queue: this.settings.queue, owner: this.name, leaseMs: this.settings.leaseMs, ...(this.settings.epoch !== undefined ? { epoch: this.settings.epoch } : {}) };
    if (this.settings.maxProcessing !== undefined) {
      // The claim limiter: never push the fleet past the cap. At the cap nothing new is
      // claimed; expired leases still go back to pending through the sweep.
      const room = this.settings.maxProcessing - (await this.ledger.countProcessing(this.settings.queue));
      if (room <= 0) {
        for (const id of ids) this.targeted.add(id);
        this.pendingAcks.unshift(...acks);
        this.noteWork();
        // Try again shortly, or as soon as one of ours finishes (finished() lifts this).
        this.cappedUntil = Date.now() + CAPPED_RETRY_MS;
        return;
      }
      free = Math.min(free, room);
      if (ids.length > free) lookFurther = true;
      ids.splice(free);
    }
    const claimed: ClaimedItem[] =
      ids.length > 0 ? await this.ledger.claimByIds({ ...base, ids, ...(this.settings.types ? { types: this.settings.types } : {}) }) : [];
    // Named by a wake-up: start them now, before looking for other heads.
    const claimedAtMs = startedAt - performance.now() + Date.now();
    if (claimed.length > 0) this.takeClaimed(claimed, claimedAtMs);
    let more = false;
    if (claimed.length < free && lookFurther) {
      const want = free - claimed.length;
      seenSignals = this.workSignals;
      const r = await this.ledger.claim({
        ...base,
        limit: want,
        classes: this.settings.classes,
        ...(this.settings.types ? { types: this.settings.types } : {}),
      });
      // While stopping these wait in the buffer, and stop() releases them.
      if (r.items.length > 0) this.takeClaimed(r.items, claimedAtMs);
      claimed.push(...r.items);
      more = r.moreAvailable || r.items.length >= want;
    } else {
      // Only named ids were claimed: more work is likely only if something already said so.
      more = lookFurther && claimed.length >= free;
    }
    this.mightHaveWork = more;
    // A lane advanced (or a wake-up or sweep came) after the head search read: look again
    // shortly. Not at once: under load the next finish says so anyway, and a round per
    // signal would make many small claims; idle, this keeps a lane from waiting for the sweep.
    if (!more && this.workSignals !== seenSignals) this.lookSoon();
    this.lastRoundFull = claimed.length >= free;
    this.emit('claimRound', { claimed: claimed.length, durationMs: performance.now() - startedAt, targeted: ids.length });
    if (acks.length > 0 && this.wake && this.streams) {
      this.streams.ack(this.wake.redis, acks).catch(() => undefined);
    }
    // Saturated with work left over: pass the wake-up on so an idle replica joins in.
    if (more && this.freeSlots() === 0) await this.publishFollowUp();
  }

  private takeClaimed(items: readonly ClaimedItem[], claimedAtMs: number): void {
    this.counters.claimed += items.length;
    for (const item of items) this.prefetched.push({ item, claimedAtMs });
    this.startPrefetched();
  }

  private async publishFollowUp(): Promise<void> {
    if (!this.wake || this.redisDown) return;
    const now = Date.now();
    if (now - this.lastFollowUpAt < FOLLOW_UP_MIN_INTERVAL_MS) return;
    this.lastFollowUpAt = now;
    this.counters.followUpWakes++;
    const queueClass = this.settings.classes[0] ?? 'default';
    await this.wake.publish([{ queue: this.settings.queue, queueClass, kind: 'advance', ids: [] }]);
  }

  private startJob(item: ClaimedItem, claimedAtMs: number): void {
    const run = runJob(this.executorDeps, item, claimedAtMs);
    this.running.set(item.id, run);
    run.start();
    if (this.cancelHints.delete(item.id)) run.checkLedger();
    this.emit('started', item);
    void run.done.then(
      (outcome) => this.finished(item, outcome, run.laneAdvanced),
      (error: unknown) => {
        this.counters.errors++;
        this.log.error({ id: item.id, err: (error as Error).message }, 'executor failed');
        this.finished(item, 'lease_lost');
      },
    );
  }

  private finished(item: ClaimedItem, outcome: Outcome, laneAdvanced?: boolean): void {
    this.running.delete(item.id);
    this.finalizing.delete(item.id);
    const key = ({
      completed: 'completed', retried: 'retried', dead: 'dead', released: 'released', blocked: 'blocked',
      cancelled: 'cancelled', skipped: 'skipped', lease_lost: 'leaseLost', abandoned: 'abandoned',
    } as const)[outcome];
    this.counters[key]++;
    this.cappedUntil = 0;
    // The slot is free; a finished lane head has a successor worth claiming right here (lane affinity),
    // unless the completion said the lane has none waiting.
    // A released item may be due again at once (a block whose key was woken while it ran).
    if ((item.lane !== null && laneAdvanced !== false) || outcome === 'released') this.noteWork();
    this.emit('outcome', item, outcome);
    this.schedulerWake.notify();
    this.readerWake.notify();
  }

  private takeEntries(entries: readonly WakeEntry[]): void {
    if (entries.length === 0) return;
    this.counters.wakeEntriesRead += entries.length;
    for (const e of entries) this.takeWake(e);
    this.pendingAcks.push(...entries);
    this.schedulerWake.notify();
  }

  private takeWake(m: WakeMessage): void {
    for (const id of m.ids) this.targeted.add(id);
    // A wake-up that names its items is answered by claiming those; one that names none (or not all) means "look".
    if (m.ids.length === 0 || m.more === true) this.noteWork();
  }

  /** A producer in this process hands a wake-up over directly; taken only while a slot is free to claim with. */
  private readonly offerLocal = (m: WakeMessage): boolean => {
    if (!this.active || this.paused || this.freeSlots() <= 0) return false;
    this.counters.localWakes++;
    this.takeWake(m);
    this.schedulerWake.notify();
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
    const held = Math.min(n, this.freeSlots());
    if (held <= 0) return undefined;
    this.directReserved += held;
    const reservedAtMs = Date.now();
    let open = true;
    const close = (): void => {
      if (!open) return;
      open = false;
      this.directReserved -= held;
    };
    return {
      lease: { owner: this.name, token: newLeaseToken(), leaseMs: this.settings.leaseMs, max: held },
      accept: (items) => {
        close();
        this.counters.claimedAtInsert += items.length;
        // The lease runs from before the insert: the keeper renews no later than it must.
        this.takeHandedOver(items, reservedAtMs);
      },
      cancel: close,
    };
  };

  /**
   * Lane affinity (docs/design.md §6): a completion batch that finishes lane heads
   * claims their successors in its own transaction, into room this consumer
   * has now (free slots and prefetch room not promised to a claim round).
   * Not for claims fenced in SQL (fleet-wide cap, ownership epoch).
   */
  private readonly successorLease = (wanted: number): SuccessorLease | undefined => {
    if (!this.claimsOutsideRounds()) return undefined;
    const room = Math.min(wanted, MAX_CLAIM_ITEMS, this.claimRoom() - this.reservedRoom);
    if (room <= 0) return undefined;
    this.reservedRoom += room;
    const claimedAtMs = Date.now();
    return {
      claim: {
        owner: this.name,
        token: newLeaseToken(),
        leaseMs: this.settings.leaseMs,
        max: room,
        classes: this.settings.classes,
        ...(this.settings.types ? { types: this.settings.types } : {}),
      },
      accept: (items) => {
        this.reservedRoom -= room;
        this.schedulerWake.notify();
        this.counters.claimedWithCompletion += items.length;
        this.takeHandedOver(items, claimedAtMs);
      },
    };
  };

  /**
   * Items claimed for this consumer outside its claim rounds (at insert, with
   * a completion) are only for a running, unpaused consumer whose claims are
   * not fenced in SQL (fleet-wide cap, ownership epoch).
   */
  private claimsOutsideRounds(): boolean {
    return this.active && !this.paused && this.settings.maxProcessing === undefined && this.settings.epoch === undefined;
  }

  /** Claimed for us outside a round: into the buffer, or straight back if we began stopping meanwhile. */
  private takeHandedOver(items: readonly ClaimedItem[], claimedAtMs: number): void {
    if (items.length === 0) return;
    if (this.active) this.takeClaimed(items, claimedAtMs);
    else this.releaseLate(items, claimedAtMs);
  }

  /** XREADGROUP only while slots are free: a saturated replica leaves wake-ups to idle ones. */
  private async readLoop(): Promise<void> {
    const wake = this.wake;
    const streams = this.streams;
    const reader = this.reader;
    if (!wake || !streams || !reader) return;
    while (this.active) {
      if (this.freeSlots() <= 0 || this.paused) {
        await this.readerWake.wait(1000);
        continue;
      }
      try {
        if (!(await whenReady(reader, 1000)) || !(await wake.usable())) throw new Error('redis is not connected');
        if (!this.groupReady) {
          await streams.ensureGroup(wake.redis);
          this.groupReady = true;
        }
        const entries = await streams.read(reader, this.name, this.freeSlots(), this.settings.readBlockMs);
        if (this.redisDown) {
          this.redisDown = false;
          this.log.info('redis is back: sweeping now, wake-ups resume');
          this.kick();
        }
        this.takeEntries(entries);
      } catch (error) {
        if (!this.active) break;
        if (String((error as Error).message).includes('NOGROUP')) this.groupReady = false;
        if (!this.redisDown) {
          this.redisDown = true;
          this.log.warn({ err: (error as Error).message }, 'redis unreachable: sweeping the ledger every redisDownPollMs');
          this.schedulerWake.notify();
        }
        await this.readerWake.wait(500);
      }
    }
  }

  /**
   * A cancel was requested for `id`: if this consumer runs it, its run asks
   * the ledger now (the message is a hint; the ledger's flag decides) and
   * aborts the handler if so. One waiting in the buffer asks as it starts.
   */
  private takeCancel(id: string): void {
    const run = this.running.get(id);
    if (run) run.checkLedger();
    else if (this.prefetched.some((p) => p.item.id === id)) this.cancelHints.add(id);
  }

  /** Plain XREAD of the queue's control stream: every process sees every message. */
  private async controlLoop(): Promise<void> {
    const wake = this.wake;
    const reader = this.controlReader;
    if (!wake || !reader) return;
    const queue = this.settings.queue;
    let after: string | undefined;
    while (this.active) {
      try {
        if (!(await whenReady(reader, 1000))) throw new Error('redis is not connected');
        after ??= await wake.control.latestId(reader, queue);
        const entries = await wake.control.read(reader, new Map([[queue, after]]), this.settings.readBlockMs);
        for (const e of entries) {
          after = e.entryId;
          const m = e.message;
          if (m.type === 'dependency') {
            for (const id of m.ids) this.targeted.add(id);
            this.kick();
          } else if (m.type === 'pause') {
            this.paused = true;
          } else if (m.type === 'resume') {
            this.paused = false;
            this.kick();
          } else if (m.type === 'cancel' && Array.isArray(m.ids)) {
            for (const id of m.ids) this.takeCancel(id);
          }
          this.emit('control', m);
        }
      } catch {
        if (!this.active) break;
        await sleep(500);
      }
    }
  }
}
