import type { ClaimedItem, QueueClass } from '../ledger/types.js';
import { offersKey } from './keys.js';
import type { ControlMessage, Handoff, Offer } from './messages.js';
import type { RedisClient } from './redis.js';

/** An offer as it sits in the list: LREM needs the exact text back. */
export interface PostedOffer {
  offer: Offer;
  wire: string;
}

/** What the offers need of their wake channel. */
export interface OfferChannel {
  readonly redis: RedisClient;
  connected(): boolean;
  /** A command on `redis` failed (a frozen Redis pauses the channel). */
  commandFailed(error: unknown): void;
  /** Publishes on a queue's control stream; false if Redis refused. `text`: the message's JSON, when made already. */
  publishControl(queue: string, message: ControlMessage, text?: string): Promise<boolean>;
}

/** An offer a producer took: the claim at insert it allows, and what follows the commit. */
export interface TakenOffer {
  readonly queue: string;
  readonly offer: Offer;
  /** One item, inserted claimed under the offer's lease. */
  readonly lease: { owner: string; token: string; leaseMs: number; max: number };
  /** Whether it may take this item now: it still stands, and takes the item's class and type. */
  fits(item: { queue: string; type: string; queueClass: QueueClass }): boolean;
  /**
   * After the commit: the items inserted under it go to its consumer on the
   * queue's control stream, which every process of the queue reads; items
   * larger than MAX_HANDOFF_BYTES in all go by count only (the consumer
   * reads them from the ledger). False if Redis refused: the consumer finds
   * them in the ledger by the offer's token.
   */
  handOver(items: readonly ClaimedItem[]): Promise<boolean>;
  /** Not used: back to the front of its list, as it was (never throws). */
  giveBack(): Promise<void>;
}

/** The most a handoff carries in its message (JSON text); larger items are read from the ledger by the consumer. */
export const MAX_HANDOFF_BYTES = 16 * 1024;

/** How long a producer does not look for offers of a queue after a look found none. */
export const OFFER_MISS_PAUSE_MS = 25;

/** Expired offers one take() drops before it gives up: each is a round trip. */
const MAX_EXPIRED_SKIPPED = 4;

/**
 * Offers on the wire (docs/design/handover.md, "Through an offer"): each queue's
 * list of standing offers, where consumers post and withdraw them and
 * producers take and give them back, and the handoff that follows a take.
 * Every RPUSH / LPOP / LPUSH / LREM on the lists lives here. A list expires
 * when no consumer has posted for a while, so a queue whose consumers are
 * all gone leaves nothing behind. Nothing here throws: an offer is an
 * optimisation, and Redis failing only means the claim goes the usual way.
 */
export class Offers {
  /** Per queue: until when take() does not look (its last look found none). */
  private readonly noOffersUntil = new Map<string, number>();

  constructor(
    private readonly prefix: string,
    private readonly channel: OfferChannel,
  ) {}

  /** A consumer's offer, posted at the end of its queue's list; undefined if Redis refused. */
  async post(queue: string, offer: Offer, listTtlMs: number): Promise<PostedOffer | undefined> {
    if (!this.channel.connected()) return undefined;
    const wire = JSON.stringify(offer);
    const key = offersKey(this.prefix, queue);
    try {
      await this.channel.redis.multi().rpush(key, wire).pexpire(key, listTtlMs).exec();
      return { offer, wire };
    } catch (error) {
      this.channel.commandFailed(error);
      return undefined;
    }
  }

  /** True: withdrawn, nobody took it. False: a producer took it. Undefined: Redis did not answer, so either. */
  async withdraw(queue: string, posted: PostedOffer): Promise<boolean | undefined> {
    if (!this.channel.connected()) return undefined;
    try {
      return (await this.channel.redis.lrem(offersKey(this.prefix, queue), 1, posted.wire)) > 0;
    } catch (error) {
      this.channel.commandFailed(error);
      return undefined;
    }
  }

  /**
   * A producer's look for the oldest standing offer of `queue`, skipping (and
   * dropping) expired ones. It costs a round trip, so after a look that found
   * none the next waits OFFER_MISS_PAUSE_MS: a producer of a busy queue (whose
   * consumers have no free slots, so post no offers) pays for a look at most
   * that often.
   */
  async take(queue: string): Promise<TakenOffer | undefined> {
    const now = Date.now();
    if (!this.channel.connected() || (this.noOffersUntil.get(queue) ?? 0) > now) return undefined;
    const posted = await this.pop(queue, now).catch((error: unknown) => {
      this.channel.commandFailed(error);
      return undefined;
    });
    if (!posted) {
      this.noOffersUntil.set(queue, now + OFFER_MISS_PAUSE_MS);
      return undefined;
    }
    this.noOffersUntil.delete(queue);
    return this.taken(queue, posted);
  }

  private async pop(queue: string, nowMs: number): Promise<PostedOffer | undefined> {
    const key = offersKey(this.prefix, queue);
    for (let i = 0; i < MAX_EXPIRED_SKIPPED; i++) {
      const wire = await this.channel.redis.lpop(key);
      if (wire === null) return undefined;
      const offer = parseOffer(wire);
      if (offer && offer.expiresAtMs > nowMs) return { offer, wire };
    }
    return undefined;
  }

  private taken(queue: string, posted: PostedOffer): TakenOffer {
    const { offer } = posted;
    const channel = this.channel;
    const key = offersKey(this.prefix, queue);
    return {
      queue,
      offer,
      lease: { owner: offer.owner, token: offer.token, leaseMs: offer.leaseMs, max: offerRoom(offer) },
      fits: (item) =>
        item.queue === queue &&
        offer.expiresAtMs > Date.now() &&
        offer.classes.includes(item.queueClass) &&
        offer.types.includes(item.type),
      handOver: async (items) => {
        const whole: Handoff = {
          type: 'handoff',
          to: offer.owner,
          token: offer.token,
          count: items.length,
          items: [...items],
        };
        const text = JSON.stringify(whole);
        if (text.length <= MAX_HANDOFF_BYTES) return channel.publishControl(queue, whole, text);
        return channel.publishControl(queue, { ...whole, items: [] });
      },
      giveBack: async () => {
        await channel.redis.lpush(key, posted.wire).catch(() => undefined);
      },
    };
  }
}

/** The items an offer takes: its room, whole and at least one (an offer from before rooms took one). */
function offerRoom(offer: Offer): number {
  const room = offer.room;
  return typeof room === 'number' && Number.isInteger(room) && room >= 1 ? Math.min(room, MAX_OFFER_ROOM) : 1;
}

/** The most items one offer takes, whatever it says. */
export const MAX_OFFER_ROOM = 64;

function parseOffer(wire: string): Offer | undefined {
  try {
    const o = JSON.parse(wire) as Partial<Offer>;
    if (typeof o.owner !== 'string' || typeof o.token !== 'string' || typeof o.leaseMs !== 'number') return undefined;
    if (
      !Array.isArray(o.classes) ||
      !Array.isArray(o.types) ||
      typeof o.expiresAtMs !== 'number' ||
      typeof o.madeAtMs !== 'number'
    )
      return undefined;
    return o as Offer;
  } catch {
    return undefined;
  }
}
