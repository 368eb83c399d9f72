import { Redis } from 'ioredis';
import { afterEach, expect, test } from 'vitest';
import type { ControlMessage, WakeEntry } from '../src/wake/messages.js';
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
    { queue, classes: ['default', 'interactive'], readBlockMs, log: silent },
    subscriber,
  );
  readers.push(reader);
  await reader.start();
  return reader;
}

/** The server's connections whose name says they are this process's blocking readers. */
async function blockingConnections(): Promise<string[]> {
  admin ??= new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
  const list = (await admin.client('LIST')) as string;
  const name = tw!.wake.hub(silent).name;
  return list
    .split('\n')
    .map((line) => /name=(\S*)/.exec(line)?.[1] ?? '')
    .filter((n) => n === `lanewake:wake:${name}`);
}

/** Waits until the doorbell read blocks on the server. */
async function blockingReadOnServer(): Promise<void> {
  await waitFor(
    async () => {
      admin ??= new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
      const list = (await admin.client('LIST')) as string;
      return list.split('\n').some((l) => l.includes('name=lanewake:wake:') && l.includes('cmd=xread')) || undefined;
    },
    5_000,
    'a blocking read',
  );
}

/** Counts the non-blocking XREADGROUP calls the channel's command connection sends from here on. */
function countGroupReads(): { calls: number } {
  const counted = { calls: 0 };
  const redis = tw!.wake.redis as unknown as { xreadgroup: (...args: unknown[]) => Promise<unknown> };
  const read = redis.xreadgroup.bind(redis);
  redis.xreadgroup = (...args) => {
    counted.calls++;
    return read(...args);
  };
  return counted;
}

test(
  '80 queues read through one channel share one blocking connection (the doorbell read); ' +
    'each wake-up and control message reaches its own queue only',
  async () => {
    tw = createTestWake();
    const queues = Array.from({ length: 80 }, (_, i) => uniqueQueue(`hub${i}`));
    const recs = queues.map(() => recorder());
    for (const [i, q] of queues.entries()) await startReader(q, recs[i]!.subscriber);
    const name = tw.wake.hub(silent).name;
    await waitFor(async () => ((await blockingConnections()).length === 1 ? true : undefined), 5_000, 'the hub');
    expect(await blockingConnections()).toEqual([`lanewake:wake:${name}`]);

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
    expect(await blockingConnections()).toHaveLength(1);

    for (const r of readers) await r.stop();
    readers = [];
    await waitFor(
      async () => ((await blockingConnections()).length === 0 ? true : undefined),
      5_000,
      'the last reader out to close it',
    );
  },
);

test('a queue that joins while the doorbell read blocks, or finds room, is read at once', async () => {
  tw = createTestWake();
  const first = uniqueQueue('hub-first');
  await startReader(first, recorder().subscriber);
  // Let the doorbell read block on the server.
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

test('a burst of rings for 300 queues is read in a few non-blocking reads, not one per queue', async () => {
  tw = createTestWake();
  const queues = Array.from({ length: 300 }, (_, i) => uniqueQueue(`burst${i}`));
  const recs = queues.map(() => recorder());
  for (const [i, q] of queues.entries()) await startReader(q, recs[i]!.subscriber);
  await blockingReadOnServer();
  const counted = countGroupReads();
  // One publish names every queue: one ring.
  await tw
    .remote()
    .publish(queues.map((queue, i) => ({ queue, queueClass: 'default', kind: 'enqueue', ids: [`b${i}`] })));
  await waitFor(() => recs.every((r) => r.seen.entries.length === 1) || undefined, 10_000, 'every queue read');
  // 600 streams (two classes a queue) in reads of at most 256 streams: three.
  expect(counted.calls).toBeLessThanOrEqual(3);
});

test("a wake-up whose ring was lost waits in its stream: the queue's next ring reads both", async () => {
  tw = createTestWake();
  const queue = uniqueQueue('hub-lost');
  const rec = recorder();
  await startReader(queue, rec.subscriber);
  await blockingReadOnServer();
  // Written as a publisher would, without the ring (it failed, or Redis trimmed it).
  await tw.wake
    .streamsOf(queue, ['default', 'interactive'])
    .publish(tw.wake.redis, [{ queueClass: 'default', kind: 'enqueue', ids: ['lost-1'] }]);
  const other = uniqueQueue('hub-other');
  const otherRec = recorder();
  await startReader(other, otherRec.subscriber);
  await tw.remote().publish([{ queue: other, queueClass: 'default', kind: 'enqueue', ids: ['o-1'] }]);
  await waitFor(() => otherRec.seen.entries.length > 0 || undefined, 5_000, 'the other queue read');
  expect(rec.seen.entries).toEqual([]);
  await tw.remote().publish([{ queue, queueClass: 'default', kind: 'enqueue', ids: ['rung-2'] }]);
  await waitFor(() => rec.seen.entries.length > 1 || undefined, 5_000, 'both wake-ups');
  expect(rec.seen.entries.flatMap((e) => e.ids)).toEqual(['lost-1', 'rung-2']);
});
