import type { ClaimedItem, QueueClass } from '../ledger/types.js';
import { offersKey } from './keys.js';
import type { RedisClient } from './redis.js';

/**
 * A consumer's standing offer to take one item of its queue the moment it is
 * inserted (docs/design.md §6, "Through an offer"): a producer in any process that pops it
 * inserts its item already claimed under the offer's lease, then hands the
 * claimed item over on the queue's control stream. The job starts after one
 * commit, not two (no claim round trip).
 */
export interface Offer {
  /** The consumer's name: the lease owner. */
  owner: string;
  /** The lease token the item is inserted under. */
  token: string;
  leaseMs: number;
  classes: readonly QueueClass[];
  /** The item types the consumer has handlers for. */
  types: readonly string[];
  /** After this (the consumer's clock, ms since epoch) no producer may use it: its consumer may be gone. */
  expiresAtMs: number;
  /** When the consumer made it: the lease runs from no earlier than this. */
  madeAtMs: number;
}

/** An offer as it sits in the list: LREM needs the exact text back. */
export interface PostedOffer {
  offer: Offer;
  wire: string;
}

/** Whether a popped offer may take this item: it still stands, and takes the item's class and type. */
export function offerFits(offer: Offer, item: { type: string; queueClass: QueueClass }, nowMs: number): boolean {
  return offer.expiresAtMs > nowMs && offer.classes.includes(item.queueClass) && offer.types.includes(item.type);
}

/**
 * Each queue's list of standing offers: every RPUSH / LPOP / LPUSH / LREM on
 * it lives here. The list expires when no consumer has posted for a while,
 * so a queue whose consumers are all gone leaves nothing behind.
 */
export class OfferLists {
  constructor(private readonly prefix: string) {}

  async post(redis: RedisClient, queue: string, offer: Offer, listTtlMs: number): Promise<PostedOffer> {
    const wire = JSON.stringify(offer);
    const key = offersKey(this.prefix, queue);
    await redis.multi().rpush(key, wire).pexpire(key, listTtlMs).exec();
    return { offer, wire };
  }

  /** True if the offer was still there (nobody took it); false if a producer popped it. */
  async withdraw(redis: RedisClient, queue: string, posted: PostedOffer): Promise<boolean> {
    return (await redis.lrem(offersKey(this.prefix, queue), 1, posted.wire)) > 0;
  }

  /** The oldest offer still standing, skipping (and dropping) expired ones. */
  async take(redis: RedisClient, queue: string, nowMs: number): Promise<PostedOffer | undefined> {
    const key = offersKey(this.prefix, queue);
    for (let i = 0; i < MAX_EXPIRED_SKIPPED; i++) {
      const wire = await redis.lpop(key);
      if (wire === null) return undefined;
      const offer = parseOffer(wire);
      if (offer && offer.expiresAtMs > nowMs) return { offer, wire };
    }
    return undefined;
  }

  /** An offer popped and not used goes back to the front, as it was. */
  async giveBack(redis: RedisClient, queue: string, posted: PostedOffer): Promise<void> {
    await redis.lpush(offersKey(this.prefix, queue), posted.wire);
  }
}

/** Expired offers one take() drops before it gives up: each is a round trip. */
const MAX_EXPIRED_SKIPPED = 4;

function parseOffer(wire: string): Offer | undefined {
  try {
    const o = JSON.parse(wire) as Partial<Offer>;
    if (typeof o.owner !== 'string' || typeof o.token !== 'string' || typeof o.leaseMs !== 'number') return undefined;
    if (!Array.isArray(o.classes) || !Array.isArray(o.types) || typeof o.expiresAtMs !== 'number' || typeof o.madeAtMs !== 'number') return undefined;
    return o as Offer;
  } catch {
    return undefined;
  }
}

const DATE_FIELDS = ['runAfter', 'leaseUntil', 'probeAfter', 'blockedAt', 'blockExpiresAt', 'replayedAt', 'createdAt', 'startedAt', 'terminalAt', 'updatedAt'] as const;

/**
 * Claimed items as the handoff carries them (JSON: dates as ISO text), and
 * back. A damaged entry decodes to nothing: the consumer then finds its items
 * in the ledger by the offer's token.
 */
export function decodeHandedOver(raw: unknown): ClaimedItem[] | undefined {
  if (!Array.isArray(raw)) return undefined;
  const out: ClaimedItem[] = [];
  for (const r of raw) {
    if (typeof r !== 'object' || r === null) return undefined;
    const item = { ...(r as Record<string, unknown>) };
    for (const f of DATE_FIELDS) {
      const v = item[f];
      if (typeof v === 'string') item[f] = new Date(v);
    }
    if (typeof item.id !== 'string' || item.state !== 'processing' || typeof item.leaseToken !== 'string') return undefined;
    out.push(item as unknown as ClaimedItem);
  }
  return out;
}
