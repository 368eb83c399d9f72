import type { SweepSignal } from '../ledger/types.js';
import type { Logger } from '../log.js';
import type { ConsumerLedger } from './ledger-port.js';

/**
 * How a consumer holds to its queue's paused flag (docs/design.md, "Pausing
 * a queue"): read at start, heard at once from the `pause`/`resume` control
 * messages, and learned from every sweep. A sweep's reading older than a
 * message heard since is not kept: it would undo the pause (or resume)
 * until the next sweep.
 */
export class PauseFollower {
  /** Pause and resume messages heard: a read of the flag begun before the last one is dropped. */
  private messages = 0;

  constructor(
    private readonly host: {
      queue: string;
      ledger: Pick<ConsumerLedger, 'pausedQueues'>;
      log: Logger;
      isPaused: () => boolean;
      setPaused: (paused: boolean) => void;
    },
  ) {}

  /** A `pause` or `resume` control message. */
  heard(paused: boolean): void {
    this.messages++;
    this.follow(paused);
  }

  /** A sweep's reading (its signal, or none: the flag is read here). One that disagrees is read again. */
  async learn(signal: SweepSignal | undefined): Promise<void> {
    if (signal !== undefined && signal.paused === this.host.isPaused()) return;
    const heard = this.messages;
    const paused = await this.read();
    if (heard === this.messages) this.follow(paused);
  }

  async read(): Promise<boolean> {
    return (await this.host.ledger.pausedQueues([this.host.queue])).has(this.host.queue);
  }

  follow(paused: boolean): void {
    if (paused === this.host.isPaused()) return;
    this.host.setPaused(paused);
    this.host.log.info({ paused }, paused ? 'queue paused: claiming nothing' : 'queue resumed');
  }
}
