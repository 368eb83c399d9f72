import type { ControlStreams } from './control.js';
import type { Doorbell } from './doorbell.js';
import type { ControlMessage, WakeEntry } from './messages.js';
import type { RedisClient, RedisTarget } from './redis.js';
import type { WakeStreams } from './streams.js';

/**
 * What a wake reader tells the one who reads through it (a consumer): which
 * items were named, when to look, what the control stream said, and whether
 * Redis is there. It never learns what a consumer does with them.
 */
export interface WakeSubscriber {
  /** How many wake entries it can act on now (free slots); 0 stops reading until notify(). */
  readRoom(): number;
  /** Entries read from the queue's streams. Acknowledge them with `ack` once acted on. */
  onEntries(entries: readonly WakeEntry[]): void;
  /** A message on the queue's control stream (every process sees each one). */
  onControl(message: ControlMessage): void;
  /** Redis went away (`false`) or came back (`true`): sweep the ledger faster meanwhile, now on return. */
  onRedisHealth(up: boolean): void;
}

/** What a hub uses of its wake channel. */
export interface HubChannel {
  readonly redis: RedisClient;
  readonly cluster: boolean;
  readonly control: ControlStreams;
  readonly doorbell: Doorbell;
  readonly options: { readonly redis: RedisTarget };
  usable(): Promise<boolean>;
}

/** One queue's reader as the hub sees it. */
export interface HubMember {
  queue: string;
  streams: WakeStreams;
  readBlockMs: number;
  subscriber: WakeSubscriber;
  /** Whether the queue's group exists on its streams (false again after Redis lost its data). */
  groupReady: boolean;
}
