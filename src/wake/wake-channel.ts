import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Cluster } from 'ioredis';
import type { Logger } from '../log.js';
import { createLogger } from '../log.js';
import { QUEUE_CLASSES, type QueueClass } from '../ledger/types.js';
import { WakeStreams, type WakeMessage } from './streams.js';
import { ControlStreams, type ControlMessage } from './control.js';
import { DEFAULT_KEY_PREFIX } from './keys.js';
import { groupBySlot } from './slots.js';
import { LocalWakeRoute, type DirectReservation, type LocalWakeTarget } from './local-route.js';
import { OfferLists, type Offer, type PostedOffer } from './offers.js';
import type { ClaimedItem } from '../ledger/types.js';
import { clusterOf, createRedisClient, whenReady, type RedisClient, type RedisTarget } from './redis.js';
import { WakeTimers, type ScheduledEnqueue, type WakeTimer } from './timers.js';
import type { Ledger } from '../ledger/ledger.js';
import { WakeHub } from './wake-hub.js';

export interface WakeChannelOptions {
  redis: RedisTarget;
  keyPrefix?: string;
  /** Approximate cap of each wake stream (XADD MAXLEN ~). */
  streamMaxLen?: number;
  logger?: Logger;
}

export interface PublishCounters {
  /** Wake-ups written to a stream. */
  published: number;
  /** Wake-ups handed to a consumer in this process instead (no Redis round trip). */
  deliveredLocally: number;
  failed: number;
}

/**
 * The producer side of Redis: wake-ups, control broadcasts and timers. Every
 * publish fails soft — a wake-up is a hint, so an unreachable Redis is
 * counted, never thrown at a caller whose work already committed. The log
 * gets the state changes only: one line when publishing starts failing, one
 * when it works again (with the failures in between), not one per publish.
 */
export class WakeChannel {
  readonly redis: RedisClient;
  /** Whether `redis` is a Redis Cluster. */
  readonly cluster: boolean;
  readonly control: ControlStreams;
  readonly timers: WakeTimers;
  readonly counters: PublishCounters = { published: 0, deliveredLocally: 0, failed: 0 };
  private readonly offers: OfferLists;
  private readonly local = new LocalWakeRoute();
  /** Per queue: until when takeOffer does not look (its last look found none). */
  private readonly noOffersUntil = new Map<string, number>();
  private readonly streams = new Map<string, WakeStreams>();
  private hub: WakeHub | undefined;
  private readonly log: Logger;
  private everReady = false;
  /** Publishes (wake-ups, control, timers) that failed since this channel was made. */
  private failures = 0;
  /** `failures` when publishing began failing; undefined while it works. */
  private failuresAtDown: number | undefined;

  constructor(readonly options: WakeChannelOptions) {
    this.cluster = clusterOf(options.redis) !== undefined;
    this.redis = createRedisClient(options.redis, 'lanewake:publish');
    this.control = new ControlStreams(this.keyPrefix);
    this.offers = new OfferLists(this.keyPrefix);
    this.timers = new WakeTimers(options.redis, 'lanewake-timers', this.keyPrefix.replace(/:$/, ''));
    this.log = options.logger ?? createLogger('lanewake.wake');
    this.redis.on('ready', () => {
      this.everReady = true;
    });
  }

  /**
   * Whether a command can go out now. Right after start-up it waits briefly
   * for the first connection; once Redis has been seen and is gone, it
   * answers false at once so a producer never waits on a dead Redis.
   */
  async usable(): Promise<boolean> {
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
   * The hub a wake reader reads through: on a plain Redis one per channel, so
   * every reader sharing it shares its blocking reads (one per 64 wake
   * streams, one for all control streams); on a cluster one per reader (a
   * read names the streams of one slot only).
   */
  hubFor(readerName: string, log: Logger): WakeHub {
    if (this.cluster) return new WakeHub(this, { name: readerName, shared: false, log });
    this.hub ??= new WakeHub(this, { name: `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`, shared: true, log: this.log });
    return this.hub;
  }

  /** Publish calls (wake-ups, control broadcasts, timer scheduling) that failed since this channel was made. */
  get publishFailures(): number {
    return this.failures;
  }

  connected(): boolean {
    return this.redis.status === 'ready';
  }

  /**
   * A consumer sharing this channel takes wake-ups of its queue in process
   * while it has free slots (see LocalWakeRoute). Returns the unregister.
   */
  registerLocal(target: LocalWakeTarget): () => void {
    return this.local.register(target);
  }

  /** Free slots of a consumer sharing this channel, for items inserted already claimed (see LocalWakeRoute). */
  reserveLocal(queue: string, queueClass: QueueClass, types: ReadonlySet<string>, n: number): DirectReservation | undefined {
    return this.local.reserve(queue, queueClass, types, n);
  }

  /** Whether a consumer of `queue` shares this channel (its producers then claim at insert for it, not through offers). */
  hasLocalConsumer(queue: string): boolean {
    return this.local.has(queue);
  }

  /**
   * Posts a consumer's offer (src/wake/offers.ts); undefined if Redis refused.
   * Offers are not wake-ups: they are neither counted nor logged as publishes.
   */
  async postOffer(queue: string, offer: Offer, listTtlMs: number): Promise<PostedOffer | undefined> {
    if (!this.connected()) return undefined;
    return this.offers.post(this.redis, queue, offer, listTtlMs).catch(() => undefined);
  }

  /** True: withdrawn, nobody took it. False: a producer took it. Undefined: Redis did not answer, so either. */
  async withdrawOffer(queue: string, posted: PostedOffer): Promise<boolean | undefined> {
    if (!this.connected()) return undefined;
    return this.offers.withdraw(this.redis, queue, posted).catch(() => undefined);
  }

  /**
   * A producer's look for a standing offer of `queue`. It costs a round
   * trip, so after a look that found none the next waits OFFER_MISS_PAUSE_MS:
   * a producer of a busy queue (whose consumers have no free slots, so post
   * no offers) pays for a look at most that often.
   */
  async takeOffer(queue: string): Promise<PostedOffer | undefined> {
    const now = Date.now();
    if (!this.connected() || (this.noOffersUntil.get(queue) ?? 0) > now) return undefined;
    const taken = await this.offers.take(this.redis, queue, now).catch(() => undefined);
    if (taken) this.noOffersUntil.delete(queue);
    else this.noOffersUntil.set(queue, now + OFFER_MISS_PAUSE_MS);
    return taken;
  }

  /** An offer taken and not used: back to the front of its list (never thrown). */
  async giveBackOffer(queue: string, posted: PostedOffer): Promise<void> {
    await this.offers.giveBack(this.redis, queue, posted).catch(() => undefined);
  }

  /**
   * After the commit: the items inserted under an offer, to the consumer that
   * made it, on the queue's control stream, which every process of the queue
   * reads. Items larger than MAX_HANDOFF_BYTES in all go by count only: the
   * consumer reads them from the ledger.
   */
  async handOver(queue: string, posted: PostedOffer, items: readonly ClaimedItem[]): Promise<boolean> {
    const { owner, token } = posted.offer;
    const whole: ControlMessage = { type: 'handoff', to: owner, token, count: items.length, items: [...items] };
    const text = JSON.stringify(whole);
    if (text.length <= MAX_HANDOFF_BYTES) return this.publishControl(queue, whole, text);
    return this.publishControl(queue, { ...whole, items: [] });
  }

  /**
   * Publishes wake-ups grouped by queue: each goes to a consumer in this
   * process if one can take it now, the rest to the streams. False if Redis
   * refused (already logged and counted).
   */
  async publish(messages: readonly (WakeMessage & { queue: string; queueClass: QueueClass })[]): Promise<boolean> {
    if (messages.length === 0) return true;
    const byQueue = new Map<string, (WakeMessage & { queueClass: QueueClass })[]>();
    for (const m of messages) {
      if (this.local.deliver(m.queue, m)) {
        this.counters.deliveredLocally++;
        continue;
      }
      byQueue.set(m.queue, [...(byQueue.get(m.queue) ?? []), m]);
    }
    if (byQueue.size === 0) return true;
    const remote = [...byQueue.values()].reduce((n, ms) => n + ms.length, 0);
    try {
      if (!(await this.usable())) throw new Error('redis is not connected');
      await Promise.all([...byQueue].map(([queue, ms]) => this.streamsOf(queue).publish(this.redis, ms)));
      this.counters.published += remote;
      this.publishWorked();
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
      await this.control.publish(this.redis, queue, message, text);
      this.publishWorked();
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
      this.publishWorked();
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
   * a due timer publishes its item's wake-up; a recurring schedule's fire goes
   * to `enqueue` under the fire's idempotency key, so one item is made per
   * fire whichever replica processes it. Started by whoever owns the channel:
   * the supervisor for `lanewake worker`; a Consumer starts it if nobody did.
   */
  startTimers(enqueue: ScheduledEnqueue): void {
    if (this.timers.started) return;
    this.timers.start({
      onDue: async (t) => {
        await this.publish([{ queue: t.queue, queueClass: t.queueClass, kind: 'timer', ids: [t.itemId] }]);
      },
      onScheduleFire: async (schedule, item, fireTimeMs) => {
        await enqueue({ ...item, idempotencyKey: `${schedule}:${fireTimeMs}` });
      },
    });
  }

  /**
   * A schedule's fire enqueued straight through `ledger`, then announced with
   * a wake-up: for a channel whose owner gave no enqueue (a Consumer's
   * default). A fire has an idempotency key, so it is never claimed at insert
   * and this does what a Producer's enqueue does with it.
   */
  enqueueThrough(ledger: Pick<Ledger, 'enqueue'>): ScheduledEnqueue {
    return async (item) => {
      const r = await ledger.enqueue(item);
      if (r.duplicate) return;
      const queueClass = item.queueClass ?? 'default';
      await this.publish([{ queue: item.queue, queueClass, kind: 'enqueue', ids: [r.id], enqueuedAtMs: Date.now() }]);
    };
  }

  private publishFailed(error: unknown, what: string): void {
    this.failures++;
    if (this.failuresAtDown !== undefined) return;
    this.failuresAtDown = this.failures - 1;
    this.log.warn(
      { err: errorSummary(error), failed: what },
      'redis publish failing: wake-ups, control messages and timers are not sent (consumers find the work by sweeping the ledger); further failures are counted, not logged',
    );
  }

  private publishWorked(): void {
    if (this.failuresAtDown === undefined) return;
    const failedWhileDown = this.failures - this.failuresAtDown;
    this.failuresAtDown = undefined;
    // At warn like the line it closes (the library logs at warn by default), with what failed meanwhile.
    this.log.warn({ failedWhileDown, publishFailures: this.failures }, 'redis publish works again');
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
    const patterns = redis instanceof Cluster ? [`${this.keyPrefix}*`, `{${this.keyPrefix.replace(/:$/, '')}}*`] : [`${this.keyPrefix}*`];
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

  async close(): Promise<void> {
    await this.timers.close();
    this.redis.disconnect();
  }
}

/** The most a handoff carries in its message (JSON text); larger items are read from the ledger by the consumer. */
export const MAX_HANDOFF_BYTES = 16 * 1024;

/** How long a producer does not look for offers of a queue after a look found none. */
export const OFFER_MISS_PAUSE_MS = 25;

function errorSummary(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
