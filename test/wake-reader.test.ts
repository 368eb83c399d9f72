import { afterEach, expect, test } from 'vitest';
import type { ControlMessage, WakeEntry } from '../src/wake/messages.js';
import { CONSUMER_GROUP } from '../src/wake/keys.js';
import { WakeReader, type WakeSubscriber } from '../src/wake/wake-reader.js';
import { createLogger } from '../src/log.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { waitFor } from './support/ledger.js';

const silent = createLogger('test', 'silent');
let tw: TestWake | undefined;
let reader: WakeReader | undefined;
afterEach(async () => {
  await reader?.stop();
  await tw?.drop();
  reader = undefined;
  tw = undefined;
});

/** A subscriber that records what it is told, with room the test sets. */
function recorder(room = 8) {
  const seen = { entries: [] as WakeEntry[], control: [] as ControlMessage[], health: [] as boolean[], room };
  const subscriber: WakeSubscriber = {
    readRoom: () => seen.room,
    onEntries: (entries) => void seen.entries.push(...entries),
    onControl: (m) => void seen.control.push(m),
    onRedisHealth: (up) => void seen.health.push(up),
  };
  return { seen, subscriber };
}

test(
  'a reader hands its subscriber the wake-ups published to its ' +
    'queue and the control messages, and acks what it is told to',
  async () => {
    tw = createTestWake();
    const queue = uniqueQueue('reader');
    const { seen, subscriber } = recorder();
    reader = new WakeReader(tw.wake, { queue, classes: ['default'], readBlockMs: 200, log: silent }, subscriber);
    await reader.start();

    const remote = tw.remote();
    await remote.publish([{ queue, queueClass: 'default', kind: 'enqueue', ids: ['a', 'b'] }]);
    await remote.publish([{ queue: uniqueQueue('other'), queueClass: 'default', kind: 'enqueue', ids: ['x'] }]);
    await waitFor(() => seen.entries.length > 0 || undefined, 5_000, 'the wake-up');
    expect(seen.entries.flatMap((e) => e.ids)).toEqual(['a', 'b']);

    await remote.publishControl(queue, { type: 'pause' });
    await waitFor(() => seen.control.length > 0 || undefined, 5_000, 'the control message');
    expect(seen.control).toEqual([{ type: 'pause' }]);

    const streams = tw.wake.streamsOf(queue, ['default']);
    const pending = async () =>
      (await tw!.wake.redis.xpending(streams.key('default'), CONSUMER_GROUP)) as [number, ...unknown[]];
    expect((await pending())[0]).toBe(1);
    await reader.ack(seen.entries);
    expect((await pending())[0]).toBe(0);
    expect(seen.health).toEqual([]);
  },
);

test('with no room the reader leaves wake-ups in the stream for other readers; given room, it reads them', async () => {
  tw = createTestWake();
  const queue = uniqueQueue('reader-room');
  const { seen, subscriber } = recorder(0);
  reader = new WakeReader(tw.wake, { queue, classes: ['default'], readBlockMs: 200, log: silent }, subscriber);
  await reader.start();
  await tw.remote().publish([{ queue, queueClass: 'default', kind: 'enqueue', ids: ['a'] }]);

  // Another member of the group, with room, takes the entry this reader would not read.
  const other = recorder(8);
  const second = new WakeReader(
    tw.wake,
    { queue, classes: ['default'], readBlockMs: 200, log: silent },
    other.subscriber,
  );
  await second.start();
  try {
    await waitFor(() => other.seen.entries.length > 0 || undefined, 5_000, 'the reader with room to read it');
    expect(seen.entries).toEqual([]);
    await second.stop();
    await tw.remote().publish([{ queue, queueClass: 'default', kind: 'enqueue', ids: ['b'] }]);
    seen.room = 4;
    reader.notify();
    await waitFor(() => seen.entries.length > 0 || undefined, 5_000, 'the first reader, given room');
    expect(seen.entries.flatMap((e) => e.ids)).toEqual(['b']);
  } finally {
    await second.stop();
  }
});

test(
  'a wake-up for a large batch is split into entries of 64 ' +
    'ids, at most 16, the last saying when ids were left over',
  async () => {
    tw = createTestWake();
    const queue = uniqueQueue('split');
    const streams = tw.wake.streamsOf(queue, ['default']);
    const entries = async () =>
      ((await tw!.wake.redis.xrange(streams.key('default'), '-', '+')) as [string, string[]][]).map(([, f]) => ({
        ids: (f[f.indexOf('i') + 1] ?? '').split(',').length,
        more: f.includes('m'),
      }));
    const ids = (n: number) => Array.from({ length: n }, (_, k) => `id${k}`);
    await tw.wake.publish([{ queue, queueClass: 'default', kind: 'enqueue', ids: ids(200) }]);
    expect(await entries()).toEqual([64, 64, 64, 8].map((n) => ({ ids: n, more: false })));
    await tw.wake.redis.del(streams.key('default'));
    await tw.wake.publish([{ queue, queueClass: 'default', kind: 'enqueue', ids: ids(1100) }]);
    const big = await entries();
    expect(big).toHaveLength(16);
    expect(big.every((e) => e.ids === 64)).toBe(true);
    expect(big.map((e) => e.more)).toEqual([...Array.from({ length: 15 }, () => false), true]);
  },
);
