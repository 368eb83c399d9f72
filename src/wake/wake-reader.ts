import type { QueueClass } from '../ledger/types.js';
import type { Logger } from '../log.js';
import type { WakeEntry } from './messages.js';
import type { WakeChannel } from './wake-channel.js';
import type { HubMember, WakeSubscriber } from './hub-types.js';
import type { WakeHub } from './wake-hub.js';

export type { WakeSubscriber } from './hub-types.js';

export interface WakeReaderOptions {
  queue: string;
  classes: readonly QueueClass[];
  /** How long the doorbell read blocks at most (the shortest of the process's readers). */
  readBlockMs: number;
  log: Logger;
}

/**
 * One consumer's reader of its queue's wake streams (as a member of the
 * queue's consumer group) and control stream (as a plain reader), through the
 * channel's hub: one blocking read of the doorbell serves every reader of the
 * process, plain Redis or cluster (src/wake/wake-hub.ts). It reads wake-ups
 * only while its subscriber has room.
 */
export class WakeReader {
  private readonly hub: WakeHub;
  private readonly member: HubMember;
  private joined = false;

  constructor(channel: WakeChannel, options: WakeReaderOptions, subscriber: WakeSubscriber) {
    this.hub = channel.hub(options.log);
    this.member = {
      queue: options.queue,
      streams: channel.streamsOf(options.queue, options.classes),
      readBlockMs: options.readBlockMs,
      subscriber,
      groupReady: false,
    };
  }

  /** False while the last read (or command) found Redis away. */
  get redisUp(): boolean {
    return this.hub.redisUp;
  }

  /** Whether entries left idle can be taken over now: Redis is up and the queue's group exists. */
  get canTakeOver(): boolean {
    return this.hub.redisUp && this.member.groupReady;
  }

  /** Joins the group (so no wake-up published from here on is missed), then reads. */
  async start(): Promise<void> {
    if (this.joined) return;
    this.joined = true;
    await this.hub.join(this.member);
  }

  /** The subscriber's room changed: a reader waiting for room reads again. */
  notify(): void {
    if (this.joined) this.hub.notify();
  }

  async ack(entries: readonly WakeEntry[]): Promise<void> {
    await this.hub.ack(this.member, entries);
  }

  /**
   * Takes over entries a stopped or stuck reader of the group left unacknowledged for `minIdleMs` (at most `count`
   * per stream); they reach the subscriber like entries read. The sweeper decides when (src/consumer/sweeper.ts).
   */
  async takeOverIdle(minIdleMs: number, count: number): Promise<void> {
    await this.hub.takeOverIdle(this.member, minIdleMs, count);
  }

  /** Stops reading and leaves the group. */
  async stop(): Promise<void> {
    if (!this.joined) return;
    this.joined = false;
    await this.hub.leave(this.member);
  }
}
