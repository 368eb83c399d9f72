/**
 * Sweeper: the one home of sweeping on the consumer side. When a consumer sweeps the ledger, what each sweep does
 * for its queue (flags learned, its maintenance share, wake entries a dead reader left taken over), and the
 * process's shared sweep. What is swept is not here: the ledger statements are in src/ledger (sql/upkeep/), the
 * Redis commands in src/wake, the steps of a maintenance pass in src/maintenance/maintainer.ts (which the
 * supervisor's reconciler also runs, fleet-wide, for every queue it serves).
 */
import type { Ledger } from '../ledger/ledger.js';
import type { SweepSignal } from '../ledger/upkeep-types.js';
import type { Logger } from '../log.js';
import { Maintainer, type MaintainerOptions } from '../maintenance/maintainer.js';
import type { WakeReader } from '../wake/wake-reader.js';
import type { ConsumerCounters } from './counters.js';
import type { QueueFlags } from './queue-flags.js';

/** Most expired leases reclaimed, and most due probes released, per sweep. */
const SWEEP_MAINTENANCE_BATCH = 500;
/** Wake entries another reader of the group read and never acknowledged are taken over after this long. */
const IDLE_WAKE_ENTRY_MS = 30_000;
/** Most idle wake entries taken over per stream and sweep. */
const TAKE_OVER_BATCH = 100;

/** The parts of its consumer a sweep works with. */
export interface SweeperParts {
  readonly queue: string;
  readonly log: Logger;
  /** The queue's flags: every sweep learns them. */
  readonly flags: Pick<QueueFlags, 'learn'>;
  /** The claim side: told to look for work (claimable heads may be there). */
  readonly claims: { kick(): void };
  readonly counters: Pick<ConsumerCounters, 'sweeps' | 'errors'>;
}

export interface SweeperOptions {
  pollIntervalMs: number;
  redisDownPollMs: number;
  /** The consumer reads wake-ups (it has a wake channel): while Redis is up, the process's shared sweep drives it. */
  shared: boolean;
  /** The sweep's share of the ledger's housekeeping for this queue (the consumer's `maintenance` setting). */
  maintenance: boolean;
  wake: MaintainerOptions['wake'];
}

type SweeperLedger = Pick<Ledger, 'sweepSignals'> & MaintainerOptions['ledger'];

/**
 * When a consumer sweeps the ledger, its backstop (docs/design/consumer.md): the
 * ledger is the truth, so a sweep finds whatever wake-ups missed. One sweep
 * at start; then
 *
 * - without a wake channel, its own timer, every `pollIntervalMs`;
 * - with one while Redis is up, the process's shared sweep (SweepGroup):
 *   one statement per interval asks which queues have work, and only those
 *   sweep;
 * - while Redis is away, its own timer again, every `redisDownPollMs`, and
 *   a sweep at once when Redis is back.
 *
 * The claim side only hears "look for work".
 */
export class Sweeper {
  private timer: NodeJS.Timeout | undefined;
  private group: SweepGroup | undefined;
  private sweeping: Promise<void> | undefined;
  private redisUp = true;
  private stopped = false;
  /** Sweeps in a row whose housekeeping failed (logged once, at the first). */
  private failures = 0;
  private readonly member: SweepMember;
  /** The sweep's share of the ledger's housekeeping for this queue (`maintenance` on). */
  private readonly maintainer: Maintainer | undefined;
  /** The consumer's wake reader (with a wake channel): sweeps take over the wake entries a dead reader left. */
  private reader: Pick<WakeReader, 'canTakeOver' | 'takeOverIdle'> | undefined;
  private lastTakeOverAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly parts: SweeperParts,
    private readonly ledger: SweeperLedger,
    private readonly options: SweeperOptions,
  ) {
    this.member = { queue: parts.queue, sweep: (signal) => this.sharedSweep(signal) };
    this.maintainer = options.maintenance
      ? new Maintainer({
          ledger,
          wake: options.wake,
          queues: [parts.queue],
          log: parts.log,
          batchSize: SWEEP_MAINTENANCE_BATCH,
        })
      : undefined;
  }

  /** Sweeps from now on; `reader`: the consumer's wake reader, once it reads. */
  start(reader?: Pick<WakeReader, 'canTakeOver' | 'takeOverIdle'>): void {
    this.reader = reader;
    void this.sweep(undefined, true);
    if (this.options.shared) {
      this.group = sweepGroupOf(this.ledger, this.options.pollIntervalMs);
      this.group.join(this.member);
    } else {
      this.every(this.options.pollIntervalMs);
    }
  }

  /** Redis went away (sweep on its own, faster) or came back (sweep now, then the shared sweep again). */
  redisHealth(up: boolean): void {
    if (this.stopped || !this.options.shared || up === this.redisUp) return;
    this.redisUp = up;
    if (up) {
      clearTimeout(this.timer);
      this.timer = undefined;
      void this.sweep(undefined, true);
    } else {
      this.every(Math.min(this.options.redisDownPollMs, this.options.pollIntervalMs));
    }
  }

  /** Stops sweeping; settles when a sweep in flight has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.group?.leave(this.member);
    await this.sweeping;
  }

  /** Its own timer: a sweep every `ms` while the shared sweep does not drive it. */
  private every(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (this.stopped || (this.options.shared && this.redisUp)) return;
      void this.sweep(undefined, true).finally(() => this.every(ms));
    }, ms);
    this.timer.unref();
  }

  /** The shared sweep came by: housekeeping, and a look for work only where the ledger says there is some. */
  private async sharedSweep(signal: SweepSignal | undefined): Promise<void> {
    // While Redis is away its own, faster sweep runs instead.
    if (this.stopped || !this.redisUp) return;
    const look = signal === undefined || signal.claimable || signal.expiredLeases || signal.dueProbes;
    await this.sweep(signal, look);
  }

  private sweep(signal: SweepSignal | undefined, look: boolean): Promise<void> {
    if (this.stopped || this.sweeping) return this.sweeping ?? Promise.resolve();
    this.parts.counters.sweeps++;
    // The claim side looks beside the housekeeping (a wake-up never waits behind it), and again after it:
    // what it reclaimed or woke is claimable now.
    if (look && signal === undefined) this.parts.claims.kick();
    this.sweeping = this.housekeep(signal, look)
      .then(() => {
        if (look) this.parts.claims.kick();
      })
      .finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  /**
   * One sweep's housekeeping for the queue: its flags learned, the
   * maintenance pass (the steps `signal` says have work; all of them when
   * undefined: expired leases and due probes back to pending, each
   * announced), and, when it looks for work, wake entries a dead reader left, taken over: in an idle queue they
   * name nothing to claim, and a worker of thousands of idle queues sends Redis nothing per sweep. Rejects when
   * it failed.
   */
  private async housekeeping(signal: SweepSignal | undefined, look: boolean): Promise<void> {
    // The ledger holds the paused flag: each sweep learns it, also with Redis down
    // (the control stream only says it sooner).
    await this.parts.flags.learn(signal);
    if (this.maintainer) {
      const failed = (await this.maintainer.pass(signal ? new Map([[signal.queue, signal]]) : undefined)).failed[0];
      if (failed) throw failed.error;
    }
    if (look) await this.takeOverIdle();
  }

  /** Wake entries a stopped or stuck reader of the group left unacknowledged, taken over (Redis up only). */
  private async takeOverIdle(): Promise<void> {
    if (!this.reader?.canTakeOver) return;
    // An entry is taken over only once idle IDLE_WAKE_ENTRY_MS: looking more often than half that finds little more.
    const now = Date.now();
    if (now - this.lastTakeOverAt < IDLE_WAKE_ENTRY_MS / 2) return;
    this.lastTakeOverAt = now;
    await this.reader.takeOverIdle(IDLE_WAKE_ENTRY_MS, TAKE_OVER_BATCH);
  }

  private async housekeep(signal: SweepSignal | undefined, look: boolean): Promise<void> {
    try {
      await this.housekeeping(signal, look);
      if (this.failures > 0) {
        this.parts.log.warn({ failedSweeps: this.failures }, 'sweep maintenance works again');
        this.failures = 0;
      }
    } catch (error) {
      this.parts.counters.errors++;
      // One line when it starts failing (Redis or the ledger away), one when it works again: not one per sweep.
      if (this.failures++ === 0)
        this.parts.log.warn(
          { err: (error as Error).message },
          'sweep maintenance failed; retried every sweep, further failures counted',
        );
    }
  }
}

/** A consumer as the shared sweep sees it. */
export interface SweepMember {
  readonly queue: string;
  /**
   * Its share of a sweep: `signal` says what the ledger holds for its queue
   * (undefined when the signals could not be read: sweep as if everything
   * were there).
   */
  sweep(signal: SweepSignal | undefined): Promise<void>;
}

/**
 * One backstop sweep for every consumer of a process that shares a ledger
 * and a sweep interval: each interval, one statement asks the ledger which
 * of their queues have claimable heads, expired leases or due probes
 * (Ledger.sweepSignals), and only those consumers claim or maintain. A
 * worker serving hundreds of idle queues sweeps them with one round trip per
 * interval instead of a claim and a maintenance pass per queue.
 */
export class SweepGroup {
  private readonly members = new Set<SweepMember>();
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;

  constructor(
    private readonly ledger: Pick<Ledger, 'sweepSignals'>,
    readonly intervalMs: number,
  ) {}

  join(member: SweepMember): void {
    this.members.add(member);
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
  }

  leave(member: SweepMember): void {
    this.members.delete(member);
    if (this.members.size > 0 || this.timer === undefined) return;
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One sweep of every member now (the timer's). */
  async tick(): Promise<void> {
    if (this.ticking || this.members.size === 0) return;
    this.ticking = true;
    try {
      const members = [...this.members];
      const queues = [...new Set(members.map((m) => m.queue))];
      const signals = await this.ledger.sweepSignals(queues).then(
        (list) => new Map(list.map((s) => [s.queue, s])),
        () => undefined,
      );
      await Promise.allSettled(members.map((m) => m.sweep(signals?.get(m.queue))));
    } finally {
      this.ticking = false;
    }
  }
}

const groups = new WeakMap<object, Map<number, SweepGroup>>();

/** The shared sweep of consumers on `ledger` sweeping every `intervalMs`, made on first use. */
function sweepGroupOf(ledger: Pick<Ledger, 'sweepSignals'>, intervalMs: number): SweepGroup {
  let byInterval = groups.get(ledger);
  if (!byInterval) groups.set(ledger, (byInterval = new Map()));
  let group = byInterval.get(intervalMs);
  if (!group) byInterval.set(intervalMs, (group = new SweepGroup(ledger, intervalMs)));
  return group;
}
