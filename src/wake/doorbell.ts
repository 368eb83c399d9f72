import type { ChainableCommander } from 'ioredis';
import { doorbellKey } from './keys.js';
import { readBlocking, type RedisClient } from './redis.js';

/** Approximate cap of the doorbell (XADD MAXLEN ~): a reader this far behind misses rings, the sweep covers them. */
const DOORBELL_MAX_LEN = 10_000;
/** Rings one read takes at most; a longer backlog is read by the next read at once. */
const RINGS_PER_READ = 1_000;

/** What the rings read since the last read named. */
export interface Rings {
  /** The id to read after next time. */
  lastId: string;
  /** Queues whose wake streams got entries. */
  wake: Set<string>;
  /** Queues whose control streams got entries. */
  control: Set<string>;
}

/**
 * The prefix's doorbell (docs/design/wake.md, "One blocking read"): one stream every publisher rings after
 * writing to a queue's wake or control stream, naming the queue. Each process reads it with one blocking XREAD
 * (not a group: every process may serve the queue), then reads only the named queues' streams without blocking.
 * One key, so one slot on a cluster. Queue names are [a-z0-9._-] (src/ledger/validation.ts): a comma joins them.
 */
export class Doorbell {
  readonly key: string;

  constructor(prefix: string) {
    this.key = doorbellKey(prefix);
  }

  /** One entry naming the queues whose wake streams (`wake`) and control streams (`control`) were written. */
  async ring(redis: RedisClient, wake: readonly string[], control: readonly string[] = []): Promise<void> {
    if (wake.length === 0 && control.length === 0) return;
    await redis.xadd(this.key, 'MAXLEN', '~', DOORBELL_MAX_LEN, '*', ...ringFields(wake, control));
  }

  /**
   * The ring as the last command of a pipeline that wrote the streams: on a plain Redis one connection runs them
   * in order, so a reader that hears it finds them, and the publish costs no round trip more.
   */
  ringAfter(pipeline: ChainableCommander, wake: readonly string[], control: readonly string[] = []): void {
    if (wake.length === 0 && control.length === 0) return;
    pipeline.xadd(this.key, 'MAXLEN', '~', DOORBELL_MAX_LEN, '*', ...ringFields(wake, control));
  }

  /** The id to start reading after, so a new reader hears only the rings that come next. */
  async latestId(redis: RedisClient): Promise<string> {
    const last = (await redis.xrevrange(this.key, '+', '-', 'COUNT', 1)) as [string, string[]][];
    return last[0]?.[0] ?? '0-0';
  }

  /** Rings after `after`, waiting up to `blockMs` for one. Needs a connection of its own. */
  async read(redis: RedisClient, after: string, blockMs: number): Promise<Rings> {
    const reply = (await readBlocking(redis, blockMs, () =>
      redis.xread('COUNT', RINGS_PER_READ, 'BLOCK', blockMs, 'STREAMS', this.key, after),
    )) as [string, [string, string[]][]][] | null;
    const rings: Rings = { lastId: after, wake: new Set(), control: new Set() };
    for (const [, entries] of reply ?? []) {
      for (const [entryId, fields] of entries) {
        rings.lastId = entryId;
        for (let i = 0; i + 1 < fields.length; i += 2) {
          const into = fields[i] === 'w' ? rings.wake : fields[i] === 'c' ? rings.control : undefined;
          for (const q of fields[i + 1]!.split(',')) if (into && q.length > 0) into.add(q);
        }
      }
    }
    return rings;
  }
}

function ringFields(wake: readonly string[], control: readonly string[]): string[] {
  const fields: string[] = [];
  if (wake.length > 0) fields.push('w', wake.join(','));
  if (control.length > 0) fields.push('c', control.join(','));
  return fields;
}
