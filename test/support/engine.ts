import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
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

export async function deleteKeys(url: string, prefix: string): Promise<void> {
  const r = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await r.del(...keys);
    } while (cursor !== '0');
  } catch {
    // Redis gone: nothing left to clean.
  } finally {
    r.disconnect();
  }
}

export function uniqueQueue(label = 'q'): string {
  return `${label}-${randomBytes(4).toString('hex')}`;
}
