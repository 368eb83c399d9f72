import { Redis } from 'ioredis';
import { afterEach, expect, test } from 'vitest';
import type { ControlMessage, WakeEntry } from '../src/wake/messages.js';
import { MAX_STREAMS_PER_READ, UNBLOCK_TRIES } from '../src/wake/wake-read-shard.js';
import { WakeReader, type WakeSubscriber } from '../src/wake/wake-reader.js';
import { createLogger } from '../src/log.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { waitFor } from './support/ledger.js';
import { redisUrl } from './support/services.js';

const silent = createLogger('test', 'silent');
/** Longer than any wait below: a reader that had to wait out a block would fail the test. */
const LONG_BLOCK_MS = 60_000;

let tw: TestWake | undefined;
let readers: WakeReader[] = [];
let admin: Redis | undefined;
afterEach(async () => {
  await Promise.allSettled(readers.map((r) => r.stop()));
  await tw?.drop();
  admin?.disconnect();
  readers = [];
  tw = undefined;
  admin = undefined;
});

function recorder(room = 8) {
  const seen = { entries: [] as WakeEntry[], control: [] as ControlMessage[], room };
  const subscriber: WakeSubscriber = {
    readRoom: () => seen.room,
    onEntries: (entries) => void seen.entries.push(...entries),
    onControl: (m) => void seen.control.push(m),
    onRedisHealth: () => undefined,
  };
  return { seen, subscriber };
}

async function startReader(
  queue: string,
  subscriber: WakeSubscriber,
  readBlockMs = LONG_BLOCK_MS,
): Promise<WakeReader> {
  const reader = new WakeReader(
    tw!.wake,
    { queue, classes: ['default', 'interactive'], name: `r-${queue}`, readBlockMs, log: silent },
    subscriber,
  );
  readers.push(reader);
  await reader.start();
  return reader;
}

/** The server's connections whose name says they are this process's blocking wake or control readers. */
async function blockingConnections(): Promise<string[]> {
  admin ??= new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
  const list = (await admin.client('LIST')) as string;
  const name = tw!.wake.hubFor('unused', silent).name;
  return list
    .split('\n')
    .map((line) => /name=(\S*)/.exec(line)?.[1] ?? '')
    .filter((n) => n === `lanewake:wake:${name}` || n === `lanewake:control:${name}`);
}

/** Waits until a wake read blocks on the server. */
async function blockingReadOnServer(): Promise<void> {
  await waitFor(
    async () => {
      admin ??= new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
      const list = (await admin.client('LIST')) as string;
      return (
        list.split('\n').some((l) => l.includes(`name=lanewake:wake:`) && l.includes('cmd=xreadgroup')) || undefined
      );
    },
    5_000,
    'a blocking read',
  );
}

test(
  '80 queues read through one channel share a blocking read per 64 streams and one ' +
    'control read; each wake-up and control message reaches its own queue only',
  async () => {
    tw = createTestWake();
    const queues = Array.from({ length: 80 }, (_, i) => uniqueQueue(`hub${i}`));
    const recs = queues.map(() => recorder());
    for (const [i, q] of queues.entries()) await startReader(q, recs[i]!.subscriber);
    // Two classes per queue: 160 streams, read by three connections.
    const name = tw.wake.hubFor('x', silent).name;
    const expected = [
      `lanewake:control:${name}`,
      ...Array.from({ length: Math.ceil(160 / MAX_STREAMS_PER_READ) }, () => `lanewake:wake:${name}`),
    ];
    await waitFor(
      async () => ((await blockingConnections()).length === expected.length ? true : undefined),
      5_000,
      'the hub connections',
    );
    expect((await blockingConnections()).sort()).toEqual(expected.sort());

    const remote = tw.remote();
    const picked = [3, 41, 79];
    for (const i of picked) {
      await remote.publish([
        { queue: queues[i]!, queueClass: i === 41 ? 'interactive' : 'default', kind: 'enqueue', ids: [`item-${i}`] },
      ]);
      await remote.publishControl(queues[i]!, { type: 'cancel', ids: [`item-${i}`] });
    }
    for (const i of picked) {
      await waitFor(
        () => (recs[i]!.seen.entries.length > 0 && recs[i]!.seen.control.length > 0) || undefined,
        5_000,
        `queue ${i}'s wake-up and control message`,
      );
    }
    recs.forEach((r, i) => {
      expect(
        r.seen.entries.flatMap((e) => e.ids),
        `queue ${i}`,
      ).toEqual(picked.includes(i) ? [`item-${i}`] : []);
      expect(r.seen.control, `queue ${i}`).toEqual(picked.includes(i) ? [{ type: 'cancel', ids: [`item-${i}`] }] : []);
    });

    for (const r of readers) await r.stop();
    readers = [];
    await waitFor(
      async () => ((await blockingConnections()).length === 0 ? true : undefined),
      5_000,
      'the last reader out to close them',
    );
  },
);

test('a queue that joins while a read blocks, or finds room, is read at once: the read is cut short', async () => {
  tw = createTestWake();
  const first = uniqueQueue('hub-first');
  await startReader(first, recorder().subscriber);
  // Let the first read block on the server.
  await blockingReadOnServer();

  const late = uniqueQueue('hub-late');
  const lateRec = recorder();
  await startReader(late, lateRec.subscriber);
  const remote = tw.remote();
  await remote.publish([{ queue: late, queueClass: 'default', kind: 'enqueue', ids: ['late-1'] }]);
  await remote.publishControl(late, { type: 'pause' });
  await waitFor(
    () => (lateRec.seen.entries.length > 0 && lateRec.seen.control.length > 0) || undefined,
    5_000,
    'the late queue read without waiting out the block',
  );

  const full = uniqueQueue('hub-full');
  const fullRec = recorder(0);
  const fullReader = await startReader(full, fullRec.subscriber);
  await remote.publish([{ queue: full, queueClass: 'default', kind: 'enqueue', ids: ['full-1'] }]);
  // With no room it is not read for: the entry waits in the stream.
  await remote.publish([{ queue: late, queueClass: 'default', kind: 'enqueue', ids: ['late-2'] }]);
  await waitFor(() => lateRec.seen.entries.length > 1 || undefined, 5_000, 'the second wake-up of the late queue');
  expect(fullRec.seen.entries).toEqual([]);
  fullRec.seen.room = 2;
  fullReader.notify();
  await waitFor(() => fullRec.seen.entries.length > 0 || undefined, 5_000, 'the queue that found room');
  expect(fullRec.seen.entries.flatMap((e) => e.ids)).toEqual(['full-1']);
});

test(
  'room that changes many times while a read blocks cuts the read ' +
    'short with one interrupt, not one CLIENT UNBLOCK per change',
  async () => {
    tw = createTestWake();
    const busy = uniqueQueue('hub-busy');
    await startReader(busy, recorder().subscriber);
    const full = uniqueQueue('hub-room');
    const fullRec = recorder(0);
    const fullReader = await startReader(full, fullRec.subscriber);
    // The read in flight names only the queue with room.
    await blockingReadOnServer();
    await tw.remote().publish([{ queue: full, queueClass: 'default', kind: 'enqueue', ids: ['room-1'] }]);

    const redis = tw.wake.redis;
    const client = redis.client.bind(redis) as (...args: unknown[]) => Promise<unknown>;
    let unblocks = 0;
    (redis as unknown as { client: (...args: unknown[]) => Promise<unknown> }).client = (...args) => {
      if (String(args[0]).toUpperCase() === 'UNBLOCK') unblocks++;
      return client(...args);
    };
    // A slot frees a hundred times over (a consumer's completions): each change of room is a notify.
    fullRec.seen.room = 2;
    for (let i = 0; i < 100; i++) fullReader.notify();
    await waitFor(() => fullRec.seen.entries.length > 0 || undefined, 5_000, 'the queue that found room');
    expect(fullRec.seen.entries.flatMap((e) => e.ids)).toEqual(['room-1']);
    // One interrupt sends at most UNBLOCK_TRIES; one per notify would send at least a hundred.
    expect(unblocks).toBeGreaterThan(0);
    expect(unblocks).toBeLessThanOrEqual(UNBLOCK_TRIES);
  },
);
