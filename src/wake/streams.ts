import { groupBy } from '../group-by.js';
import type { QueueClass } from '../ledger/types.js';
import { CONSUMER_GROUP, wakeStreamKey } from './keys.js';
import type { WakeEntry, WakeKind, WakeMessage } from './messages.js';
import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from './redis.js';

/** A raw XREADGROUP reply: per stream, its entries as [id, fields]. */
export type GroupReadReply = readonly [string, [string, string[]][]][];

/**
 * New entries of `keys` (wake streams of one or more queues) for `consumer`
 * of the group, at most `count` per stream, without blocking: the doorbell
 * (doorbell.ts) said which queues to read. On a cluster, keys of one slot only.
 */
export async function readGroupNow(
  redis: RedisClient,
  consumer: string,
  keys: readonly string[],
  count: number,
): Promise<GroupReadReply> {
  if (keys.length === 0) return [];
  const reply = (await redis.xreadgroup(
    'GROUP',
    CONSUMER_GROUP,
    consumer,
    'COUNT',
    count,
    'STREAMS',
    ...keys,
    ...keys.map(() => '>'),
  )) as [string, [string, string[]][]][] | null;
  return reply ?? [];
}

/** Runs a pipeline; throws the first command's error, if any. */
export async function execAll(pipeline: ChainableCommander): Promise<void> {
  const results = await pipeline.exec();
  const failed = results?.find(([error]) => error !== null);
  if (failed?.[0]) throw failed[0];
}

/** Ids named in one entry. */
export const MAX_IDS_PER_ENTRY = 64;
/** Entries one wake-up is split into at most (1,024 ids); more are left to the claim's own head search. */
export const MAX_ENTRIES_PER_MESSAGE = 16;

/**
 * The wake streams of one queue (one per class) and their consumer group:
 * every XADD / XREADGROUP / XACK / XAUTOCLAIM / XGROUP / XTRIM lives here.
 */
export class WakeStreams {
  private readonly keys: Map<QueueClass, string>;
  private readonly classByKey: Map<string, QueueClass>;
  private readonly keyList: readonly string[];

  constructor(
    private readonly prefix: string,
    readonly queue: string,
    classes: readonly QueueClass[],
    private readonly maxLen = 10_000,
  ) {
    this.keys = new Map(classes.map((c) => [c, wakeStreamKey(prefix, queue, c)]));
    this.classByKey = new Map([...this.keys].map(([c, k]) => [k, c]));
    this.keyList = [...this.keys.values()];
  }

  key(queueClass: QueueClass): string {
    return this.keys.get(queueClass) ?? wakeStreamKey(this.prefix, this.queue, queueClass);
  }

  /**
   * Appends each message as entries of up to MAX_IDS_PER_ENTRY ids, at most
   * MAX_ENTRIES_PER_MESSAGE of them (the last says `m` when ids are left
   * over); one round trip. The group hands each entry to one consumer, so a
   * large batch in several entries wakes several idle replicas at once
   * instead of one that then has to pass the wake-up on.
   */
  async publish(redis: RedisClient, messages: readonly (WakeMessage & { queueClass: QueueClass })[]): Promise<void> {
    if (messages.length === 0) return;
    const pipeline = redis.pipeline();
    this.addTo(pipeline, messages);
    await execAll(pipeline);
  }

  /** The XADDs of publish, onto a pipeline of the caller's (which may hold other queues' and the doorbell's). */
  addTo(pipeline: ChainableCommander, messages: readonly (WakeMessage & { queueClass: QueueClass })[]): void {
    for (const m of messages) {
      const chunks = Math.max(1, Math.min(MAX_ENTRIES_PER_MESSAGE, Math.ceil(m.ids.length / MAX_IDS_PER_ENTRY)));
      for (let c = 0; c < chunks; c++) {
        const ids = m.ids.slice(c * MAX_IDS_PER_ENTRY, (c + 1) * MAX_IDS_PER_ENTRY);
        const fields = ['k', m.kind, 'i', ids.join(',')];
        const last = c === chunks - 1;
        if (last && (m.more === true || m.ids.length > chunks * MAX_IDS_PER_ENTRY)) fields.push('m', '1');
        if (m.lane) fields.push('l', m.lane);
        if (m.enqueuedAtMs !== undefined) fields.push('t', String(m.enqueuedAtMs));
        pipeline.xadd(this.key(m.queueClass), 'MAXLEN', '~', this.maxLen, '*', ...fields);
      }
    }
  }

  /**
   * Creates the group on every stream of the queue (and the streams).
   * Idempotent. A new group starts at the beginning of the stream, not at
   * `$`: it is only ever new for a queue's first consumer or after Redis lost
   * its data, and in both cases the entries already there announce work that
   * is waiting (a producer may publish between the restart and our XGROUP).
   */
  async ensureGroup(redis: RedisClient): Promise<void> {
    for (const key of this.keys.values()) {
      try {
        await redis.xgroup('CREATE', key, CONSUMER_GROUP, '0', 'MKSTREAM');
      } catch (error) {
        if (!String((error as Error).message).includes('BUSYGROUP')) throw error;
      }
    }
  }

  /** The queue's stream keys, one per class (read on every blocking read: built once). */
  streamKeys(): readonly string[] {
    return this.keyList;
  }

  /** Whether `stream` is one of this queue's streams. */
  covers(stream: string): boolean {
    return this.classByKey.has(stream);
  }

  /** This queue's entries in a reply of readGroupNow (which may name other queues' streams too). */
  entriesOf(reply: GroupReadReply): WakeEntry[] {
    return this.parse(reply.filter(([stream]) => this.covers(stream)));
  }

  async ack(redis: RedisClient, entries: readonly WakeEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const pipeline = redis.pipeline();
    for (const [stream, acked] of groupBy(entries, (e) => e.stream))
      pipeline.xack(stream, CONSUMER_GROUP, ...acked.map((e) => e.entryId));
    await pipeline.exec();
  }

  /**
   * Takes over entries that another consumer read but never acknowledged
   * (it died) once they have been idle `minIdleMs`.
   */
  async reclaimIdle(redis: RedisClient, consumer: string, minIdleMs: number, count: number): Promise<WakeEntry[]> {
    const out: WakeEntry[] = [];
    for (const key of this.keys.values()) {
      const reply = (await redis.xautoclaim(key, CONSUMER_GROUP, consumer, minIdleMs, '0-0', 'COUNT', count)) as [
        string,
        [string, string[] | null][],
        ...unknown[],
      ];
      const entries = (reply[1] ?? []).filter((e): e is [string, string[]] => Array.isArray(e[1]));
      out.push(...this.parse([[key, entries]]));
    }
    return out;
  }

  /** Removes a stopped consumer from the group; its unacknowledged entries go with it (the sweep covers them). */
  async removeConsumer(redis: RedisClient, consumer: string): Promise<void> {
    for (const key of this.keys.values()) {
      try {
        await redis.xgroup('DELCONSUMER', key, CONSUMER_GROUP, consumer);
      } catch (error) {
        if (!String((error as Error).message).includes('NOGROUP')) throw error;
      }
    }
  }

  async trim(redis: RedisClient): Promise<void> {
    for (const key of this.keys.values()) await redis.xtrim(key, 'MAXLEN', '~', this.maxLen);
  }

  private parse(reply: GroupReadReply): WakeEntry[] {
    const out: WakeEntry[] = [];
    for (const [stream, entries] of reply) {
      const queueClass = this.classByKey.get(stream) ?? 'default';
      for (const [entryId, fields] of entries) {
        const f = new Map<string, string>();
        for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
        const ids = f.get('i');
        const t = f.get('t');
        out.push({
          stream,
          entryId,
          queueClass,
          kind: (f.get('k') ?? 'enqueue') as WakeKind,
          lane: f.get('l') ?? null,
          ids: ids ? ids.split(',').filter((x) => x.length > 0) : [],
          ...(f.get('m') === '1' ? { more: true } : {}),
          ...(t !== undefined ? { enqueuedAtMs: Number(t) } : {}),
        });
      }
    }
    return out;
  }
}
