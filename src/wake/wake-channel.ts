import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Cluster } from 'ioredis';
import type { Logger } from '../log.js';
import { createLogger } from '../log.js';
import { QUEUE_CLASSES, type QueueClass } from '../ledger/types.js';
import { execAll, WakeStreams } from './streams.js';
import { ControlStreams } from './control.js';
import { Doorbell } from './doorbell.js';
import { controlStreamKey, DEFAULT_KEY_PREFIX, offersKey, wakeStreamKey } from './keys.js';
import type { ControlMessage, WakeMessage } from './messages.js';
import { groupBySlot } from './slots.js';
import { LocalWakeRoute } from './local-route.js';
import { Offers } from './offers.js';
import { PublishHealth } from './publish-health.js';
import {
  afterUnanswered,
  clusterOf,
  createRedisClient,
  whenReady,
  type RedisClient,
  type RedisTarget,
} from './redis.js';
import { WakeTimers, type WakeTimer } from './timers.js';
import { WakeHub } from './wake-hub.js';
import { groupBy } from '../group-by.js';

export interface WakeChannelOptions {
  redis: RedisTarget;
  keyPrefix?: string;
  /** Approximate cap of each wake stream (XADD MAXLEN ~). */
  streamMaxLen?: number;
  logger?: Logger;
}

/**
 * How long the channel sends nothing after Redis left a command unanswered: a frozen Redis costs one command timeout
 * per pause, not one per enqueue.
 */
const UNANSWERED_PAUSE_MS = 2_000;

export interface PublishCounters {
  /** Wake-ups written to a stream. */
  published: number;
  /** Wake-ups handed to a consumer in this process instead (no Redis round trip). */
  deliveredLocally: number;
  failed: number;
}

/**
 * A process's link to Redis, shared by its producers and consumers: wake-ups
 * (to consumers in this process in memory, else to the streams), control
 * broadcasts, offers, timers, and the hub its consumers read through. Every
 * publish fails soft — a wake-up is a hint, so an unreachable Redis is
 * counted, never thrown at a caller whose work already committed
 * (publish-health.ts logs the state changes only).
 */
export class WakeChannel {
  readonly redis: RedisClient;
  /** Whether `redis` is a Redis Cluster. */
  readonly cluster: boolean;
  readonly control: ControlStreams;
  /** Rung after every write to a wake or control stream: what the process's one blocking read waits on. */
  readonly doorbell: Doorbell;
  readonly timers: WakeTimers;
  /** Consumers' standing offers and their handoffs (docs/design/handover.md, "Through an offer"). */
  readonly offers: Offers;
  /** The consumers sharing this channel: producers hand them wake-ups and claimed items in memory. */
  readonly local = new LocalWakeRoute();
  readonly counters: PublishCounters = { published: 0, deliveredLocally: 0, failed: 0 };
  private readonly health: PublishHealth;
  private readonly streams = new Map<string, WakeStreams>();
  private sharedHub: WakeHub | undefined;
  private everReady = false;
  /** After a command Redis left unanswered, none goes out before this (ms). */
  private unansweredUntil = 0;

  constructor(readonly options: WakeChannelOptions) {
    this.cluster = clusterOf(options.redis) !== undefined;
    this.redis = createRedisClient(options.redis, 'lanewake:publish', 'commands');
    this.control = new ControlStreams(this.keyPrefix);
    this.doorbell = new Doorbell(this.keyPrefix);
    this.offers = new Offers(this.keyPrefix, this);
    this.timers = new WakeTimers(options.redis, 'lanewake-timers', this.keyPrefix.replace(/:$/, ''));
    this.health = new PublishHealth(options.logger ?? createLogger('lanewake.wake'));
    this.redis.on('ready', () => {
      this.everReady = true;
    });
  }

  /**
   * Whether a command can go out now. Right after start-up it waits briefly
   * for the first connection; once Redis has been seen and is gone, it
   * answers false at once so a producer never waits on a dead Redis. After
   * a command Redis left unanswered (frozen: the connection looks ready),
   * it answers false for UNANSWERED_PAUSE_MS, so each enqueue does not wait
   * out a command timeout of its own.
   */
  async usable(): Promise<boolean> {
    if (Date.now() < this.unansweredUntil) return false;
    if (this.redis.status === 'ready') return true;
    if (this.everReady) return false;
    return whenReady(this.redis, 1000);
  }

  get keyPrefix(): string {
    return this.options.keyPrefix ?? DEFAULT_KEY_PREFIX;
  }

  streamsOf(queue: string, classes: readonly QueueClass[] = QUEUE_CLASSES): WakeStreams {
    const k = `${queue}|${classes.join(',')}`;
    let s = this.streams.get(k);
    if (!s) {
      s = new WakeStreams(this.keyPrefix, queue, classes, this.options.streamMaxLen);
      this.streams.set(k, s);
    }
    return s;
  }

  /**
   * The hub every wake reader of this channel reads through: one blocking read of the doorbell for all of
   * them, plain Redis or cluster (src/wake/wake-hub.ts).
   */
  hub(log: Logger): WakeHub {
    this.sharedHub ??= new WakeHub(this, {
      name: `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`,
      log,
    });
    return this.sharedHub;
  }

  /** Publish calls (wake-ups, control broadcasts, timer scheduling) that failed since this channel was made. */
  get publishFailures(): number {
    return this.health.failures;
  }

  connected(): boolean {
    return this.redis.status === 'ready' && Date.now() >= this.unansweredUntil;
  }

  /** A command on `redis` failed: one Redis left unanswered pauses the channel's commands (see usable()). */
  commandFailed(error: unknown): void {
    if (afterUnanswered(this.redis, error)) this.unansweredUntil = Date.now() + UNANSWERED_PAUSE_MS;
  }

  private publishFailed(error: unknown, what: string): void {
    this.commandFailed(error);
    this.health.failed(error, what);
  }

  /**
   * Publishes wake-ups grouped by queue: each goes to a consumer in this
   * process if one can take it now, the rest to the streams. False if Redis
   * refused (already logged and counted).
   */
  async publish(messages: readonly (WakeMessage & { queue: string; queueClass: QueueClass })[]): Promise<boolean> {
    if (messages.length === 0) return true;
    const toStreams = messages.filter((m) => {
      const local = this.local.deliver(m.queue, m);
      if (local) this.counters.deliveredLocally++;
      return !local;
    });
    if (toStreams.length === 0) return true;
    const byQueue = groupBy(toStreams, (m) => m.queue);
    const remote = toStreams.length;
    try {
      if (!(await this.usable())) throw new Error('redis is not connected');
      if (this.cluster) {
        await Promise.all([...byQueue].map(([queue, ms]) => this.streamsOf(queue).publish(this.redis, ms)));
        // After the entries have answered: a reader that hears the ring finds them (they may be on other nodes).
        await this.doorbell.ring(this.redis, [...byQueue.keys()]);
      } else {
        const pipeline = this.redis.pipeline();
        for (const [queue, ms] of byQueue) this.streamsOf(queue).addTo(pipeline, ms);
        this.doorbell.ringAfter(pipeline, [...byQueue.keys()]);
        await execAll(pipeline);
      }
      this.counters.published += remote;
      this.health.worked();
      return true;
    } catch (error) {
      this.counters.failed += remote;
      this.publishFailed(error, 'wake publish');
      return false;
    }
  }

  async publishControl(queue: string, message: ControlMessage, text?: string): Promise<boolean> {
    try {
      if (!(await this.usable())) throw new Error('redis is not connected');
      if (this.cluster) {
        await this.control.publish(this.redis, queue, message, text);
        await this.doorbell.ring(this.redis, [], [queue]);
      } else {
        const pipeline = this.redis.pipeline();
        this.control.addTo(pipeline, queue, message, text);
        this.doorbell.ringAfter(pipeline, [], [queue]);
        await execAll(pipeline);
      }
      this.health.worked();
      return true;
    } catch (error) {
      this.counters.failed++;
      this.publishFailed(error, `control publish (${message.type})`);
      return false;
    }
  }

  async scheduleTimers(timers: readonly WakeTimer[]): Promise<boolean> {
    if (timers.length === 0) return true;
    try {
      if (!(await this.usable())) throw new Error('redis is not connected');
      await this.timers.schedule(timers);
      this.health.worked();
      return true;
    } catch (error) {
      this.counters.failed += timers.length;
      this.publishFailed(error, 'timer scheduling');
      return false;
    }
  }

  /** Whether this channel's timer processor runs in this process (see startTimers). */
  get timersStarted(): boolean {
    return this.timers.started;
  }

  /**
   * Runs the timer processor on this channel, once (later calls do nothing):
   * a due timer publishes its item's wake-up. Started by whoever owns the
   * channel: the supervisor for `lanewake worker`; a Consumer starts it if
   * nobody did. (Recurring schedules are fired from the ledger, src/schedules/.)
   */
  startTimers(): void {
    if (this.timers.started) return;
    this.timers.start({
      onDue: async (t) => {
        await this.publish([{ queue: t.queue, queueClass: t.queueClass, kind: 'timer', ids: [t.itemId] }]);
      },
    });
  }

  /**
   * Deletes every key under this channel's prefix (streams, groups, BullMQ
   * timers). For throwaway prefixes — demos and tests — never a shared one.
   */
  async dropKeys(): Promise<number> {
    if (!(await this.usable())) return 0;
    const redis = this.redis;
    // A cluster's SCAN sees one node's keys: scan each master. BullMQ's keys are `{prefix}…` there (see WakeTimers).
    const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
    const patterns =
      redis instanceof Cluster
        ? [`${this.keyPrefix}*`, `{${this.keyPrefix.replace(/:$/, '')}}*`]
        : [`${this.keyPrefix}*`];
    let dropped = 0;
    for (const node of nodes) {
      for (const pattern of patterns) {
        let cursor = '0';
        do {
          const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 500);
          cursor = next;
          // DEL of several keys must stay in one slot on a cluster.
          for (const group of redis instanceof Cluster ? groupBySlot(keys, (k) => k) : [keys]) {
            if (group.length > 0) dropped += await redis.del(...group);
          }
        } while (cursor !== '0');
      }
    }
    return dropped;
  }

  /**
   * Deletes one queue's keys: its wake streams (with their groups), control
   * stream and offers, for `lanewake queue delete`. All in the queue's slot.
   * Returns how many existed; 0 when Redis cannot be reached.
   */
  async dropQueueKeys(queue: string): Promise<number> {
    if (!(await this.usable())) return 0;
    const keys = [
      ...QUEUE_CLASSES.map((c) => wakeStreamKey(this.keyPrefix, queue, c)),
      controlStreamKey(this.keyPrefix, queue),
      offersKey(this.keyPrefix, queue),
    ];
    return this.redis.del(...keys);
  }

  async close(): Promise<void> {
    await this.timers.close();
    this.redis.disconnect();
  }
}
