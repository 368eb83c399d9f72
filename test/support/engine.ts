import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { isClusterUrl, parseClusterUrl } from '../../src/wake/redis.js';
import { WakeChannel } from '../../src/wake/wake-channel.js';
import { redisUrl } from './services.js';

export interface TestWake {
  wake: WakeChannel;
  keyPrefix: string;
  /**
   * Another channel on the same keys, as a producer in another process has:
   * its wake-ups go through Redis, never straight to a consumer on `wake`.
   */
  remote: () => WakeChannel;
  /** Closes the channel and deletes every key under this test's prefix. */
  drop: () => Promise<void>;
}

/** A wake channel whose Redis keys all live under a prefix of this test's own. */
export function createTestWake(url = redisUrl()): TestWake {
  const keyPrefix = `lwt:${randomBytes(4).toString('hex')}:`;
  const wake = new WakeChannel({ redis: url, keyPrefix });
  const others: WakeChannel[] = [];
  return {
    wake,
    keyPrefix,
    remote: () => {
      const other = new WakeChannel({ redis: url, keyPrefix });
      others.push(other);
      return other;
    },
    drop: async () => {
      for (const c of [wake, ...others]) await c.close().catch(() => undefined);
      await deleteKeys(url, keyPrefix);
    },
  };
}

/**
 * Deletes every key under `prefix`: on one Redis, or on each node of a cluster (a redis+cluster:// URL; a replica
 * refuses the DEL, its master does it).
 */
export async function deleteKeys(url: string, prefix: string): Promise<void> {
  const nodes = isClusterUrl(url) ? parseClusterUrl(url).cluster.map((n) => ({ host: n.host, port: n.port })) : [url];
  for (const node of nodes) {
    const r =
      typeof node === 'string'
        ? new Redis(node, { maxRetriesPerRequest: 1, lazyConnect: true })
        : new Redis({ ...node, maxRetriesPerRequest: 1, lazyConnect: true });
    r.on('error', () => undefined);
    try {
      let cursor = '0';
      do {
        const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
        cursor = next;
        // One key at a time: on a cluster's node, keys of one batch may lie in different slots.
        for (const key of keys) await r.del(key).catch(() => undefined);
      } while (cursor !== '0');
    } catch {
      // Redis gone: nothing left to clean.
    } finally {
      r.disconnect();
    }
  }
}

export function uniqueQueue(label = 'q'): string {
  return `${label}-${randomBytes(4).toString('hex')}`;
}
