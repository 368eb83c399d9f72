import { afterEach, expect, test } from 'vitest';
import { createLogger } from '../src/log.js';
import { createRedisClient, isUnanswered, whenReady, type RedisClient } from '../src/wake/redis.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { PrivateRedis } from './support/processes.js';

// A frozen Redis (SIGSTOP: it answers nothing and closes nothing, as a stalled or cut-off server) holds
// no caller: commands fail as unanswered, the channel then leaves Redis alone for a while, and a blocking
// wake read ends as unanswered, so its consumer takes Redis for gone (and sweeps) rather than for idle.

let redis: PrivateRedis | undefined;
const closers: (() => unknown)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await Promise.resolve(close()).catch(() => undefined);
  await redis?.destroy();
  redis = undefined;
});

function channelOn(r: PrivateRedis): WakeChannel {
  const wake = new WakeChannel({ redis: r.url, keyPrefix: 'lwt:frozen:', logger: createLogger('test', 'silent') });
  closers.push(() => wake.close());
  return wake;
}

test('on a frozen Redis a publish fails instead of waiting; the channel then sends nothing for a while', async () => {
  redis = await PrivateRedis.start();
  const wake = channelOn(redis);
  const wakeUp = { queue: 'q', queueClass: 'default' as const, kind: 'enqueue' as const, ids: ['a'] };
  expect(await wake.publish([wakeUp])).toBe(true);

  redis.freeze();
  expect(await wake.publish([wakeUp])).toBe(false);
  // Paused: the next ones fail at once, without a command of their own waiting out the timeout.
  expect(wake.connected()).toBe(false);
  expect(await wake.usable()).toBe(false);
  expect(await wake.offers.take('q')).toBeUndefined();

  redis.thaw();
  // The pause ends, and the same channel publishes again.
  await expect.poll(() => wake.publish([wakeUp]), { timeout: 10_000, interval: 100 }).toBe(true);
});

test('a blocking doorbell read on a frozen Redis ends as unanswered, not as an empty read', async () => {
  redis = await PrivateRedis.start();
  const wake = channelOn(redis);
  expect(await wake.usable()).toBe(true);
  const reader: RedisClient = createRedisClient(redis.url, 'lanewake:test-reader', 'blocking');
  closers.push(() => reader.disconnect());
  expect(await whenReady(reader, 10_000)).toBe(true);
  // Idle: a read that blocks and ends empty.
  const after = await wake.doorbell.latestId(wake.redis);
  expect(await wake.doorbell.read(reader, after, 100)).toEqual({ lastId: after, wake: new Set(), control: new Set() });

  redis.freeze();
  const error = await wake.doorbell.read(reader, after, 100).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isUnanswered(error)).toBe(true);
});
