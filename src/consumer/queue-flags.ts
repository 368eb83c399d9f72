/** Queue flags: the consumer's one copy of its queue's paused, stale-only and fair flags from the ledger. */
import type { SweepSignal } from '../ledger/upkeep-types.js';
import type { Logger } from '../log.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { StaleGate } from './stale-gate.js';

/**
 * How a consumer holds to its queue's flags in the ledger. The one home of
 * each flag in the consumer: the claim side reads them here, keeping no copy.
 *
 * - **Paused** (docs/design/supervisor.md, "Pausing a queue"): read at start, heard at
 *   once from the `pause`/`resume` control messages, and learned from every
 *   sweep. A sweep's reading older than a message heard since is not kept:
 *   it would undo the pause (or resume) until the next sweep.
 * - **Stale-only** (docs/design/consumer.md, "Stale-only claims"): read at start and
 *   learned from every sweep; while on, claims take only rescued work.
 * - **Fair** (docs/design/keys.md, "Fair queues"): read at start and learned from
 *   every sweep. A fair queue's consumer claims nothing with its completions
 *   (no lane successor, no key's next): those would keep a lane or key it
 *   already runs in its slots ahead of other keys' rounds.
 */
export class QueueFlags {
  /** Pause and resume messages heard: a read of the flag begun before the last one is dropped. */
  private messages = 0;
  private fairNow = false;
  private staleOnlyNow = false;
  private pausedNow = false;

  /** Who follows the paused flag beside the claim side, which reads it here (the consumer's offers). */
  private readonly pauseListeners: ((paused: boolean) => void)[] = [];

  constructor(
    private readonly queue: string,
    private readonly ledger: Pick<ConsumerLedger, 'pausedQueues' | 'sweepSignals'>,
    private readonly log: Logger,
    /** Holds the queue's stale-only flag (Ledger.setStaleOnly), as read at start and at every sweep. */
    private readonly gate: Pick<StaleGate, 'setQueue'>,
  ) {}

  /** `listener` hears each change of the paused flag, after it is read here. */
  onPauseChanged(listener: (paused: boolean) => void): void {
    this.pauseListeners.push(listener);
  }

  /** Whether the queue is fair, as last read. */
  get fair(): boolean {
    return this.fairNow;
  }

  /** Whether the queue is paused (Ledger.pause), as last heard: its consumer claims nothing. */
  get paused(): boolean {
    return this.pausedNow;
  }

  /** Both flags, at the consumer's start; the paused one is followed. */
  async start(): Promise<void> {
    // One row per queue asked, whether or not the ledger holds a row for it.
    const [signal] = await this.ledger.sweepSignals([this.queue]);
    this.fairNow = signal?.fair === true;
    this.staleOnlyNow = signal?.staleOnly === true;
    this.gate.setQueue(this.staleOnlyNow);
    this.follow(signal?.paused === true);
  }

  /** A `pause` or `resume` control message. */
  heard(paused: boolean): void {
    this.messages++;
    this.follow(paused);
  }

  /** A sweep's reading (its signal, or none: the paused flag is read here). One that disagrees is read again. */
  async learn(signal: SweepSignal | undefined): Promise<void> {
    if (signal !== undefined) {
      this.fairNow = signal.fair;
      this.staleOnly(signal.staleOnly);
    }
    if (signal !== undefined && signal.paused === this.pausedNow) return;
    const heard = this.messages;
    const paused = await this.read();
    if (heard === this.messages) this.follow(paused);
  }

  private staleOnly(on: boolean): void {
    if (on === this.staleOnlyNow) return;
    this.staleOnlyNow = on;
    this.gate.setQueue(on);
    this.log.info(
      { staleOnly: on },
      on ? 'queue stale-only: claiming only rescued work' : 'queue stale-only off: claiming pending work again',
    );
  }

  private async read(): Promise<boolean> {
    return (await this.ledger.pausedQueues([this.queue])).has(this.queue);
  }

  private follow(paused: boolean): void {
    if (paused === this.pausedNow) return;
    this.pausedNow = paused;
    for (const listener of this.pauseListeners) listener(paused);
    this.log.info({ paused }, paused ? 'queue paused: claiming nothing' : 'queue resumed');
  }
}
