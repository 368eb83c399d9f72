import { controlStreamKey } from './keys.js';
import type { RedisClient } from './redis.js';
import { groupBySlot } from './slots.js';

/** Broadcasts every process of a queue must see (plain XREAD, no group). */
export type ControlMessage =
  | { type: 'dependency'; key: string; ids: string[] }
  | { type: 'ownership'; epoch: number; deployment: string }
  | { type: 'pause' }
  | { type: 'resume' }
  /** The ledger holds a cancel request for these running items: their holders ask it now, not at the next renewal. */
  | { type: 'cancel'; ids: string[] }
  /**
   * Items a producer inserted claimed under consumer `to`'s offer `token`
   * (src/wake/offers.ts), `count` of them, as claimed items: that consumer
   * starts them. `items` is empty when they were too large to broadcast:
   * the consumer reads them from the ledger by the token. `count` 0: the
   * producer could not use the offer after all, and the slot is free again.
   */
  | { type: 'handoff'; to: string; token: string; count: number; items: unknown[] };

export interface ControlEntry {
  queue: string;
  entryId: string;
  message: ControlMessage;
}

/** The control stream of each queue: every XADD / XREAD on it lives here. */
export class ControlStreams {
  constructor(
    private readonly prefix: string,
    private readonly maxLen = 1000,
  ) {}

  /** `text`: the message's JSON, when the caller has it already (the handoff measures its size). */
  async publish(redis: RedisClient, queue: string, message: ControlMessage, text = JSON.stringify(message)): Promise<void> {
    await redis.xadd(controlStreamKey(this.prefix, queue), 'MAXLEN', '~', this.maxLen, '*', 'm', text);
  }

  /** The id to start reading after, so a new reader sees only what comes next. */
  async latestId(redis: RedisClient, queue: string): Promise<string> {
    const last = (await redis.xrevrange(controlStreamKey(this.prefix, queue), '+', '-', 'COUNT', 1)) as [string, string[]][];
    return last[0]?.[0] ?? '0-0';
  }

  /**
   * The queues split so that one read() of each part is single-slot (on a
   * cluster, one XREAD naming streams of several slots is CROSSSLOT). On a
   * plain Redis, one part.
   */
  readGroups(queues: readonly string[], cluster: boolean): string[][] {
    if (!cluster) return queues.length > 0 ? [[...queues]] : [];
    return groupBySlot(queues, (q) => controlStreamKey(this.prefix, q));
  }

  /** Entries after `after[queue]` on each queue's control stream, waiting up to `blockMs` (on a cluster: queues of one readGroups part). */
  async read(redis: RedisClient, after: ReadonlyMap<string, string>, blockMs: number): Promise<ControlEntry[]> {
    const queues = [...after.keys()];
    if (queues.length === 0) return [];
    const reply = (await redis.xread(
      'COUNT',
      100,
      'BLOCK',
      blockMs,
      'STREAMS',
      ...queues.map((q) => controlStreamKey(this.prefix, q)),
      ...queues.map((q) => after.get(q) ?? '$'),
    )) as [string, [string, string[]][]][] | null;
    const out: ControlEntry[] = [];
    for (const [stream, entries] of reply ?? []) {
      const queue = queues.find((q) => controlStreamKey(this.prefix, q) === stream);
      if (queue === undefined) continue;
      for (const [entryId, fields] of entries) {
        const raw = fields[fields.indexOf('m') + 1];
        if (raw === undefined) continue;
        try {
          out.push({ queue, entryId, message: JSON.parse(raw) as ControlMessage });
        } catch {
          // A foreign or damaged entry: skip it, the ledger still holds the truth.
        }
      }
    }
    return out;
  }
}
