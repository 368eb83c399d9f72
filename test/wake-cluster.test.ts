import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { Cluster } from 'ioredis';
import { createLogger } from '../src/log.js';
import type { ControlMessage, WakeEntry } from '../src/wake/messages.js';
import { controlStreamKey, wakeStreamKey } from '../src/wake/keys.js';
import { parseClusterUrl } from '../src/wake/redis.js';
import { keySlot } from '../src/wake/slots.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { WakeReader, type WakeSubscriber } from '../src/wake/wake-reader.js';
import { uniqueQueue } from './support/engine.js';
import { waitFor } from './support/ledger.js';
import { startRedisCluster, type LocalRedisCluster } from './support/redis-cluster.js';

const silent = createLogger('test', 'silent');
let cluster: LocalRedisCluster;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster();
});
afterAll(async () => {
  await cluster?.stop();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function channel(keyPrefix: string): WakeChannel {
  const wake = new WakeChannel({ redis: cluster.url, keyPrefix, logger: silent });
  cleanups.push(() => wake.close());
  return wake;
}

function recorder() {
  const seen = { entries: [] as WakeEntry[], control: [] as ControlMessage[] };
  const subscriber: WakeSubscriber = {
    readRoom: () => 8,
    onEntries: (entries) => void seen.entries.push(...entries),
    onControl: (m) => void seen.control.push(m),
    onRedisHealth: () => undefined,
  };
  return { seen, subscriber };
}

/** Queues whose keys live on `n` different masters. */
async function queuesOnDistinctMasters(prefix: string, n: number): Promise<string[]> {
  const byMaster = new Map<number, string>();
  while (byMaster.size < n) {
    const q = uniqueQueue('cq');
    const m = await cluster.masterOf(controlStreamKey(prefix, q));
    if (!byMaster.has(m.port)) byMaster.set(m.port, q);
  }
  return [...byMaster.values()];
}

test('cluster URLs parse into seeds, credentials and TLS', () => {
  expect(parseClusterUrl('redis+cluster://10.0.0.1:7000,10.0.0.2:7001')).toEqual({
    cluster: [
      { host: '10.0.0.1', port: 7000 },
      { host: '10.0.0.2', port: 7001 },
    ],
  });
  expect(parseClusterUrl('rediss+cluster://app:s%40cret@[::1]:7000,h2/')).toEqual({
    cluster: [
      { host: '::1', port: 7000 },
      { host: 'h2', port: 6379 },
    ],
    username: 'app',
    password: 's@cret',
    tls: true,
  });
  expect(() => parseClusterUrl('redis+cluster://h1:70a0')).toThrow(/host:port/);
});

test('every key of one queue hashes to one slot; our CRC16 agrees with the server', async () => {
  const prefix = 'lw:';
  const queue = uniqueQueue('slot');
  const keys = [
    wakeStreamKey(prefix, queue, 'default'),
    wakeStreamKey(prefix, queue, 'interactive'),
    controlStreamKey(prefix, queue),
  ];
  const slots = await Promise.all(
    keys.map((k) => cluster.cli(cluster.ports[0]!, 'cluster', 'keyslot', k).then(Number)),
  );
  expect(new Set(slots).size).toBe(1);
  expect(keys.map(keySlot)).toEqual(slots);
});

test('wake-ups and control messages of queues on different masters reach their readers via the cluster', async () => {
  const prefix = `lwt:${randomBytes(4).toString('hex')}:`;
  const wake = channel(prefix);
  expect(wake.cluster).toBe(true);
  const queues = await queuesOnDistinctMasters(prefix, 3);
  const recorders = queues.map(() => recorder());
  for (const [i, queue] of queues.entries()) {
    const reader = new WakeReader(
      wake,
      { queue, classes: ['default', 'interactive'], readBlockMs: 200, log: silent },
      recorders[i]!.subscriber,
    );
    await reader.start();
    cleanups.push(() => reader.stop());
  }
  const remote = channel(prefix);
  // A fresh client gives a publish 1 s to connect, then leaves the item to the sweep; a loaded
  // machine can take longer to learn the cluster's slots, and this test is about delivery.
  await waitFor(() => remote.usable(), 10_000, 'the publishing client to connect');
  expect(
    await remote.publish(
      queues.flatMap((queue, i) => [
        { queue, queueClass: 'default' as const, kind: 'enqueue' as const, ids: [`d${i}`] },
        { queue, queueClass: 'interactive' as const, kind: 'enqueue' as const, ids: [`i${i}`] },
      ]),
    ),
  ).toBe(true);
  await waitFor(
    () => recorders.every((r) => r.seen.entries.length === 2) || undefined,
    10_000,
    "every queue's wake-ups",
  );
  for (const [i, r] of recorders.entries())
    expect(r.seen.entries.map((e) => e.ids[0]).sort()).toEqual([`d${i}`, `i${i}`]);

  for (const queue of queues) expect(await remote.publishControl(queue, { type: 'pause' })).toBe(true);
  await waitFor(
    () => recorders.every((r) => r.seen.control.length === 1) || undefined,
    10_000,
    "every queue's control message",
  );
  expect(remote.publishFailures).toBe(0);
  // Three queues on three masters, one blocking read: the doorbell's, on its slot's master (this file's cluster;
  // the cluster client may hold an idle connection to another node besides).
  const lists = await Promise.all(cluster.ports.map((port) => cluster.cli(port, 'client', 'list')));
  const blocked = lists
    .flatMap((l) => l.split('\n'))
    .filter((l) => l.includes('name=lanewake:wake:') && l.includes('cmd=xread'));
  expect(blocked).toHaveLength(1);
});

test("a read of several queues' control streams goes out once per slot, never CROSSSLOT", async () => {
  const prefix = `lwt:${randomBytes(4).toString('hex')}:`;
  const wake = channel(prefix);
  const queues = await queuesOnDistinctMasters(prefix, 3);
  const reader = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })));
  cleanups.push(async () => reader.disconnect());
  const streams = queues.map((q) => controlStreamKey(prefix, q));
  // What one XREAD of every queue would do on a cluster:
  await expect(reader.xread('COUNT', 1, 'STREAMS', ...streams, ...streams.map(() => '0-0'))).rejects.toThrow(
    /CROSSSLOT/,
  );

  const groups = wake.control.readGroups(queues, true);
  expect(groups.map((g) => g.length)).toEqual([1, 1, 1]);
  expect(wake.control.readGroups(queues, false)).toEqual([queues]);
  for (const queue of queues) await wake.publishControl(queue, { type: 'ownership', epoch: 1, deployment: queue });
  const seen = (
    await Promise.all(groups.map((g) => wake.control.read(reader, new Map(g.map((q) => [q, '0-0'])), 100)))
  ).flat();
  expect(seen.map((e) => e.queue).sort()).toEqual([...queues].sort());
});

test('BullMQ timers run on the cluster under a hash-tagged prefix; dropKeys empties every master', async () => {
  const prefix = `lwt:${randomBytes(4).toString('hex')}:`;
  const wake = channel(prefix);
  const queue = uniqueQueue('timer');
  const due: string[] = [];
  wake.timers.start({ onDue: async (t) => void due.push(t.itemId) });
  expect(
    await wake.scheduleTimers([
      { queue, queueClass: 'default', itemId: 'item-1', attempt: 1, runAt: new Date(Date.now() + 300) },
    ]),
  ).toBe(true);
  await waitFor(() => due.length > 0 || undefined, 10_000, 'the timer to fire');
  expect(due).toEqual(['item-1']);

  for (const q of await queuesOnDistinctMasters(prefix, 3))
    await wake.publish([{ queue: q, queueClass: 'default', kind: 'enqueue', ids: ['x'] }]);
  expect(await wake.dropKeys()).toBeGreaterThanOrEqual(3);
  const left = await Promise.all(
    (await cluster.nodes())
      .filter((n) => n.role === 'master')
      .map((n) => cluster.cli(n.port, '--scan', '--pattern', `${prefix}*`)),
  );
  expect(left.join('')).toBe('');
});
