import type { ChainableCommander } from 'ioredis';
import type { ClaimedItem } from '../ledger/types.js';
import { controlStreamKey } from './keys.js';
import type { ControlEntry, ControlMessage } from './messages.js';
import { readBlocking, type RedisClient } from './redis.js';
import { groupBySlot } from './slots.js';

/** Entries of one control stream one read takes at most: a read that took this many reads again. */
export const CONTROL_PER_READ = 100;

/** The control stream of each queue: every XADD / XREAD on it lives here. */
export class ControlStreams {
  constructor(
    private readonly prefix: string,
    private readonly maxLen = 1000,
  ) {}

  /** `text`: the message's JSON, when the caller has it already (the handoff measures its size). */
  async publish(
    redis: RedisClient,
    queue: string,
    message: ControlMessage,
    text = JSON.stringify(message),
  ): Promise<void> {
    await redis.xadd(controlStreamKey(this.prefix, queue), 'MAXLEN', '~', this.maxLen, '*', 'm', text);
  }

  /** The XADD of publish, onto a pipeline of the caller's. */
  addTo(pipeline: ChainableCommander, queue: string, message: ControlMessage, text = JSON.stringify(message)): void {
    pipeline.xadd(controlStreamKey(this.prefix, queue), 'MAXLEN', '~', this.maxLen, '*', 'm', text);
  }

  /** The id to start reading after, so a new reader sees only what comes next. */
  async latestId(redis: RedisClient, queue: string): Promise<string> {
    const last = (await redis.xrevrange(controlStreamKey(this.prefix, queue), '+', '-', 'COUNT', 1)) as [
      string,
      string[],
    ][];
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

  /**
   * Entries after `after[queue]` on each queue's control stream, at most CONTROL_PER_READ each (on a cluster:
   * queues of one readGroups part). Without `blockMs`, at once: the hub reads what the doorbell named. With it,
   * waiting up to `blockMs` for one, on a connection of its own (the supervisor's ControlWatch).
   */
  async read(redis: RedisClient, after: ReadonlyMap<string, string>, blockMs?: number): Promise<ControlEntry[]> {
    const queues = [...after.keys()];
    if (queues.length === 0) return [];
    const streams = [
      'STREAMS',
      ...queues.map((q) => controlStreamKey(this.prefix, q)),
      ...queues.map((q) => after.get(q) ?? '0-0'),
    ];
    const reply = (
      blockMs === undefined
        ? await redis.xread('COUNT', CONTROL_PER_READ, ...(streams as ['STREAMS', ...string[]]))
        : await readBlocking(redis, blockMs, () =>
            redis.xread('COUNT', CONTROL_PER_READ, 'BLOCK', blockMs, ...(streams as ['STREAMS', ...string[]])),
          )
    ) as [string, [string, string[]][]][] | null;
    const queueOf = new Map(queues.map((q) => [controlStreamKey(this.prefix, q), q]));
    const out: ControlEntry[] = [];
    for (const [stream, entries] of reply ?? []) {
      const queue = queueOf.get(stream);
      if (queue === undefined) continue;
      for (const [entryId, fields] of entries) {
        const raw = fields[fields.indexOf('m') + 1];
        if (raw === undefined) continue;
        const message = decodeControl(raw);
        // A foreign or damaged entry is skipped: the ledger still holds the truth.
        if (message) out.push({ queue, entryId, message });
      }
    }
    return out;
  }
}

/** A control message from its JSON text, a handoff's items as claimed items; undefined if it is not one. */
function decodeControl(raw: string): ControlMessage | undefined {
  let m: unknown;
  try {
    m = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (typeof m !== 'object' || m === null || typeof (m as { type?: unknown }).type !== 'string') return undefined;
  const message = m as ControlMessage;
  if (message.type !== 'handoff') return message;
  if (typeof message.to !== 'string' || typeof message.token !== 'string' || typeof message.count !== 'number')
    return undefined;
  // Damaged items decode to none: the consumer finds them in the ledger by the offer's token.
  return { ...message, items: claimedItemsOf(message.items) ?? [] };
}

const DATE_FIELDS = [
  'runAfter',
  'leaseUntil',
  'probeAfter',
  'blockedAt',
  'blockExpiresAt',
  'replayedAt',
  'createdAt',
  'startedAt',
  'terminalAt',
  'updatedAt',
] as const;

/** Claimed items as a handoff carries them (JSON: dates as ISO text), back as items; undefined if any is not one. */
function claimedItemsOf(raw: unknown): ClaimedItem[] | undefined {
  if (!Array.isArray(raw)) return undefined;
  const out: ClaimedItem[] = [];
  for (const r of raw) {
    if (typeof r !== 'object' || r === null) return undefined;
    const item = { ...(r as Record<string, unknown>) };
    for (const f of DATE_FIELDS) {
      const v = item[f];
      if (typeof v === 'string') item[f] = new Date(v);
    }
    if (typeof item.id !== 'string' || item.state !== 'processing' || typeof item.leaseToken !== 'string')
      return undefined;
    out.push(item as unknown as ClaimedItem);
  }
  return out;
}
