import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import type { Outcome } from '../src/consumer/job-run.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import { Supervisor } from '../src/supervisor/supervisor.js';
import { controlStreamKey, wakeStreamKey } from '../src/wake/keys.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { uniqueQueue } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { startRedisCluster, type LocalRedisCluster } from './support/redis-cluster.js';
import { captureLog } from './support/captured-log.js';

// The engine on a real 3-master, 3-replica Redis Cluster (see test/support/redis-cluster.ts).
const silent = createLogger('test', 'silent');
let cluster: LocalRedisCluster;
let tl: TestLedger;
const cleanups: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  [cluster, tl] = await Promise.all([startRedisCluster(), createTestLedger()]);
});
afterAll(async () => {
  await tl?.drop();
  await cluster?.stop();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

/** A channel on the cluster, as one process has; `prefix` shared by the channels of one test. */
function channel(prefix: string, on: LocalRedisCluster = cluster): WakeChannel {
  const wake = new WakeChannel({ redis: on.url, keyPrefix: prefix, logger: silent });
  cleanups.push(() => wake.close());
  return wake;
}

function newPrefix(): string {
  return `lwt:${randomBytes(4).toString('hex')}:`;
}

async function started(consumer: Consumer): Promise<Consumer> {
  await consumer.start();
  cleanups.push(() => consumer.stop({ drainTimeoutMs: 1000 }));
  return consumer;
}

/**
 * A started consumer for the fault tests: short reads, and a backstop sweep every second, which runs
 * what a wake-up lost to the fault would have named (test/wake-frozen.test.ts: a read left unanswered
 * marks Redis down, and the sweep then runs every 200 ms).
 */
function faultConsumer(
  prefix: string,
  queue: string,
  on: LocalRedisCluster = cluster,
  opts: { pollIntervalMs?: number; logger?: Logger } = {},
): Promise<Consumer> {
  return started(
    new Consumer({
      ledger: tl.ledger,
      wake: channel(prefix, on),
      queue,
      concurrency: 8,
      pollIntervalMs: opts.pollIntervalMs ?? 1_000,
      redisDownPollMs: 200,
      readBlockMs: 500,
      logger: opts.logger ?? silent,
      handlers: { t: async () => undefined },
    }),
  );
}

/** What reached a consumer through Redis: wake-ups read, and items handed over under its offers. */
function viaRedisOf(consumer: Consumer): number {
  return consumer.counters.wakeEntriesRead + consumer.counters.handedOver;
}

test('a consumer completes items woken through the cluster, published by a producer in another process', async () => {
  const prefix = newPrefix();
  const queue = uniqueQueue('cl');
  const consumer = await started(
    new Consumer({
      ledger: tl.ledger,
      wake: channel(prefix),
      queue,
      concurrency: 8,
      pollIntervalMs: 60_000,
      logger: silent,
      handlers: { t: async () => undefined },
    }),
  );
  const producer = new Producer({ ledger: tl.ledger, wake: channel(prefix) });
  await producer.enqueueMany(
    Array.from({ length: 50 }, (_, n) => ({ queue, type: 't', lane: `L${n % 3}`, payload: { n } })),
  );
  await waitFor(() => consumer.counters.completed === 50 || undefined, 20_000, 'all completed');
  expect(consumer.counters.wakeEntriesRead).toBeGreaterThan(0);
  expect(consumer.counters.sweeps).toBe(1);
  expect((await tl.ledger.stats(queue))[0]?.counts.completed.count).toBe(50);
});

test('a delayed item is woken by its BullMQ timer, and a recurring schedule fires, on the cluster', async () => {
  const prefix = newPrefix();
  const queue = uniqueQueue('cl-timer');
  const ran: { type: string; at: number }[] = [];
  const wake = channel(prefix);
  const consumer = await started(
    new Consumer({
      ledger: tl.ledger,
      wake,
      queue,
      concurrency: 4,
      pollIntervalMs: 60_000,
      logger: silent,
      handlers: {
        later: async () => void ran.push({ type: 'later', at: Date.now() }),
        tick: async () => void ran.push({ type: 'tick', at: Date.now() }),
      },
    }),
  );
  await waitFor(() => consumer.counters.sweeps >= 1 || undefined, 5_000, 'first sweep');
  const producer = new Producer({ ledger: tl.ledger, wake });
  const enqueuedAt = Date.now();
  await producer.enqueue({ queue, type: 'later', payload: {}, delayMs: 300 });
  await waitFor(() => ran.some((r) => r.type === 'later') || undefined, 15_000, 'the delayed item to run');
  expect(ran.find((r) => r.type === 'later')!.at - enqueuedAt).toBeGreaterThanOrEqual(300);

  const name = `every-${queue}`;
  await producer.schedule({ name, everyMs: 200, item: { queue, type: 'tick', payload: {} } });
  cleanups.push(() => producer.unschedule(name));
  await waitFor(() => ran.filter((r) => r.type === 'tick').length >= 2 || undefined, 15_000, 'two schedule fires');
  await producer.unschedule(name);
  expect(consumer.counters.sweeps).toBe(1);
});

test("a cancel from elsewhere reaches the running handler over the queue's control stream on the cluster", async () => {
  const prefix = newPrefix();
  const queue = uniqueQueue('cl-cancel');
  const outcomes = new Map<string, Outcome>();
  const consumer = await started(
    new Consumer({
      ledger: tl.ledger,
      wake: channel(prefix),
      queue,
      concurrency: 2,
      leaseMs: 30_000,
      pollIntervalMs: 60_000,
      logger: silent,
      handlers: {
        t: async (_job, ctx) => {
          await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
          ctx.signal.throwIfAborted();
        },
      },
    }),
  );
  // In the order they happen: the cancel heard on the control stream, then the outcome it caused.
  const events: string[] = [];
  consumer.on('outcome', (item, o) => {
    outcomes.set(item.id, o);
    events.push(`outcome ${o}`);
  });
  consumer.on('control', (m) => void (m.type === 'cancel' && events.push(`control cancel ${m.ids.join(',')}`)));
  const producer = new Producer({ ledger: tl.ledger, wake: channel(prefix) });
  const { id } = await producer.enqueue({ queue, type: 't', payload: {} });
  await waitFor(
    async () => (await tl.ledger.get(id))?.state === 'processing' || undefined,
    10_000,
    'the item to start',
  );
  expect(await producer.cancel(id)).toBe('cancel_requested');
  await waitFor(() => outcomes.get(id), 15_000, 'the cancelled outcome');
  // Heard on the control stream, not found at a lease renewal (every 10 s here): the message came first.
  expect(events).toEqual([`control cancel ${id}`, 'outcome cancelled']);
});

test('a worker on redis+cluster:// hears activations of standby queues on different masters at once', async () => {
  const prefix = newPrefix();
  const queues: string[] = [];
  const masters = new Set<number>();
  while (queues.length < 3) {
    const q = uniqueQueue('cl-own');
    const m = await cluster.masterOf(controlStreamKey(prefix, q));
    if (masters.has(m.port)) continue;
    masters.add(m.port);
    queues.push(q);
  }
  const ran: string[] = [];
  const worker = new Supervisor({
    config: resolveWorkerConfig([
      {
        databaseUrl: tl.url,
        redisUrl: cluster.url,
        redisKeyPrefix: prefix,
        deployment: 'green',
        handlers: 'inline',
        admin: false,
        // Far off: only the control message can make the takeover prompt.
        ownershipCheckMs: 60_000,
        drainTimeoutMs: 2_000,
        queues: queues.map((name) => ({ name, concurrency: 2, ownership: true })),
      },
    ]),
    handlers: Object.fromEntries(queues.map((q) => [q, { job: async (j: { id: string }) => void ran.push(j.id) }])),
    logger: silent,
  });
  // The operator's side is connected before the worker starts, so the first activation follows start() at once.
  const wake = channel(prefix);
  expect(await wake.usable()).toBe(true);
  const producer = new Producer({ ledger: tl.ledger, wake });
  cleanups.push(() => worker.stop());
  await worker.start();
  for (const queue of queues) {
    const { epoch } = await tl.ledger.activate({ queue, deployment: 'green', expectEpoch: 0 });
    // One broadcast, as `lanewake activate` sends: a started worker hears it (its ownership check is a minute off).
    expect(await wake.publishControl(queue, { type: 'ownership', epoch, deployment: 'green' })).toBe(true);
    await waitFor(
      () => worker.ownership.get(queue)?.state === 'owner' || undefined,
      5_000,
      `the activation of ${queue} to be heard`,
    );
    if (queue === queues[0]) expect((await worker.readiness()).ready).toBe(false); // the other two still stand by
    const { id } = await producer.enqueue({ queue, type: 'job', payload: {} });
    await waitFor(() => ran.includes(id) || undefined, 10_000, `an item of ${queue} to run`);
  }
  expect((await worker.readiness()).ready).toBe(true);
});

test("failover: a queue's slot master dies, its replica takes over, wake-ups resume and nothing is lost", async () => {
  const prefix = newPrefix();
  const queue = uniqueQueue('cl-failover');
  const wakeReads: number[] = [];
  const consumer = await faultConsumer(prefix, queue);
  const producer = new Producer({ ledger: tl.ledger, wake: channel(prefix) });
  const viaRedis = (): number => viaRedisOf(consumer);
  let enqueued = 0;
  let slowestEnqueueMs = 0;
  let producing = true;
  const produce = (async () => {
    while (producing) {
      const t = Date.now();
      const readBefore = viaRedis();
      await producer.enqueue({ queue, type: 't', payload: { n: enqueued } });
      slowestEnqueueMs = Math.max(slowestEnqueueMs, Date.now() - t);
      enqueued++;
      // Pace: the next enqueue once this one's wake-up was read (or its handoff), or after a while
      // if none comes (Redis down).
      await waitFor(() => viaRedis() > readBefore || Date.now() - t > 50 || undefined, 5_000, 'pace');
      if (viaRedis() > readBefore) wakeReads.push(Date.now());
    }
  })();
  cleanups.push(async () => {
    producing = false;
    await produce;
  });
  await waitFor(() => wakeReads.length >= 5 || undefined, 10_000, 'wake-ups before the failover');

  const master = await cluster.masterOf(wakeStreamKey(prefix, queue, 'default'));
  const killedAt = Date.now();
  cluster.kill(master.port);
  // Enqueued while the slot's master is down: their wake-ups fail or reach no one; the sweep must find them.
  const gap = await Promise.all(
    Array.from({ length: 5 }, (_, k) => producer.enqueue({ queue, type: 't', payload: { gap: k } })),
  );
  enqueued += gap.length;
  await cluster.waitHealthy(20_000);
  const healthyAt = Date.now();
  const firstWakeAfter = await waitFor(
    () => wakeReads.find((t) => t > killedAt),
    20_000,
    'a wake-up after the failover',
  );
  await waitFor(
    () => wakeReads.filter((t) => t > firstWakeAfter).length >= 5 || undefined,
    10_000,
    'wake-ups flowing again',
  );
  producing = false;
  await produce;
  // The consumer counts an item once its completion's answer is back, a moment after the ledger shows it completed.
  await waitFor(
    async () =>
      (consumer.counters.completed === enqueued &&
        (await tl.ledger.stats(queue))[0]?.counts.completed.count === enqueued) ||
      undefined,
    15_000,
    'every item enqueued, gap or not, completed',
  );
  expect((await cluster.masterOf(wakeStreamKey(prefix, queue, 'default'))).port).not.toBe(master.port);
  // The spike, for the record (printed only if the test fails; see the report in the PR).
  console.log(
    `failover: cluster ok again after ${healthyAt - killedAt} ms; first ` +
      `wake-up delivered again ${firstWakeAfter - killedAt} ms after the master ` +
      `was killed; slowest enqueue ${slowestEnqueueMs} ms; ${enqueued} items`,
  );
  expect(consumer.counters.completed).toBe(enqueued);
  for (const g of gap) expect((await tl.ledger.get(g.id))?.state).toBe('completed');
});

test(
  'a frozen master (SIGSTOP: it answers nothing, closes nothing) holds no enqueue: they go ' +
    'on, the sweep runs them, the clients find the promoted replica, and nothing is lost',
  async () => {
    // A cluster of its own: the failover test leaves a master with no replica, and a frozen master
    // needs one to be replaced.
    const own = await startRedisCluster();
    cleanups.push(() => own.stop());
    const prefix = newPrefix();
    const queue = uniqueQueue('cl-freeze');
    // The backstop sweep at its default pace (5 s): ten items in 20 s while the master is frozen take the
    // sweep the consumer runs every 200 ms once it notices Redis gone. After the promotion a wake-up lost in
    // the switch costs one backstop interval at most, by design, so the producer waits longer than that.
    const log = captureLog('warn');
    const consumer = await faultConsumer(prefix, queue, own, { pollIntervalMs: 5_000, logger: log.logger });
    const producer = new Producer({ ledger: tl.ledger, wake: channel(prefix, own) });
    const viaRedis = (): number => viaRedisOf(consumer);
    let enqueued = 0;
    let producing = true;
    const produce = (async () => {
      while (producing) {
        await producer.enqueue({ queue, type: 't', payload: { n: enqueued } });
        enqueued++;
        await waitFor(
          () => consumer.counters.completed >= enqueued || undefined,
          15_000,
          'the item done before the next',
        );
      }
    })();
    cleanups.push(async () => {
      producing = false;
      await produce;
    });
    await waitFor(() => enqueued >= 5 || undefined, 10_000, 'items before the freeze');

    const master = await own.masterOf(wakeStreamKey(prefix, queue, 'default'));
    expect(log.at(40, /redis unreachable/)).toEqual([]);
    const sweepsBefore = consumer.counters.sweeps;
    own.freeze(master.port);
    cleanups.push(async () => own.thaw(master.port));
    // Every Redis command of an enqueue (the offer look, the wake-up) goes to the frozen
    // master's slot; none may hold it.
    const before = enqueued;
    await waitFor(
      () => enqueued >= before + 10 || undefined,
      20_000,
      'enqueues going on, and their items done, while the master is frozen',
    );
    // The consumer noticed the freeze (its read went unanswered) and swept the ledger on its own.
    expect(log.at(40, /redis unreachable: sweeping the ledger every redisDownPollMs/).length).toBeGreaterThan(0);
    expect(consumer.counters.sweeps).toBeGreaterThan(sweepsBefore);
    // The cluster promotes the frozen master's replica; the clients must find it (a frozen node sends no MOVED).
    const viaRedisFrozen = viaRedis();
    await waitFor(
      () => viaRedis() >= viaRedisFrozen + 5 || undefined,
      20_000,
      'wake-ups or handoffs through the promoted replica, the old master still frozen',
    );
    own.thaw(master.port);
    producing = false;
    await produce;
    await waitFor(
      async () =>
        (consumer.counters.completed === enqueued &&
          (await tl.ledger.stats(queue))[0]?.counts.completed.count === enqueued) ||
        undefined,
      15_000,
      'every item completed',
    );
    await consumer.stop({ drainTimeoutMs: 1000 });
  },
);
