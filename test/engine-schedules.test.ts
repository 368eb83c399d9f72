import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { ValidationError } from '../src/errors.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, testTxnMode, waitFor, type TestLedger } from './support/ledger.js';
import { Ledger } from '../src/ledger/ledger.js';
import { redisUrl } from './support/services.js';

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  await tw?.drop();
  await tl?.drop();
});

test('a recurring schedule makes one item per fire, whichever replica fires it', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('sched');
  // A second replica: its own ledger and Redis connections under the same key prefix (one schedule
  // firer per ledger and process).
  const otherLedger = new Ledger({ url: tl.url, ...testTxnMode() });
  cleanups.push(() => otherLedger.close());
  const otherWake = new WakeChannel({ redis: redisUrl(), keyPrefix: tw.keyPrefix });
  cleanups.push(() => otherWake.close());
  const ran: string[] = [];
  const consumers = [
    [tl.ledger, tw.wake],
    [otherLedger, otherWake],
  ].map(
    ([ledger, wake]) =>
      new Consumer({
        ledger: ledger as Ledger,
        wake: wake as WakeChannel,
        queue,
        concurrency: 4,
        pollIntervalMs: 60_000,
        handlers: { tick: async (job: { id: string }) => void ran.push(job.id) },
      }),
  );
  for (const c of consumers) {
    await c.start();
    cleanups.push(() => c.stop());
  }
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  const made = await producer.schedule({
    name: `every-${queue}`,
    everyMs: 200,
    item: { queue, type: 'tick', payload: { from: 'schedule' } },
  });
  // The ledger holds it, not Redis.
  expect(made.source).toBe('api');
  expect((await tl.ledger.schedules.get(`every-${queue}`))?.everyMs).toBe(200);
  cleanups.push(() => producer.unschedule(`every-${queue}`));
  await waitFor(() => (ran.length >= 3 ? true : undefined), 20_000, 'three fires to run');
  await producer.unschedule(`every-${queue}`);

  // A handler's start is recorded before its completion is written: wait for the completions.
  const started = [...ran];
  const items = await waitFor(
    async () => {
      const got = await Promise.all(started.map((id) => tl!.ledger.get(id)));
      return got.every((i) => i?.state === 'completed') ? got : undefined;
    },
    10_000,
    'every run to complete',
  );
  const keys = items.map((i) => i?.idempotencyKey ?? '');
  for (const k of keys) expect(k).toMatch(new RegExp(`^every-${queue}:\\d+$`));
  expect(new Set(keys).size).toBe(keys.length);
  expect(new Set(ran).size).toBe(ran.length);
  // The fire times are the interval's multiples, each made once.
  for (const k of keys) expect(Number(k.split(':').pop()) % 200).toBe(0);
  expect(await tl.ledger.schedules.get(`every-${queue}`)).toBeUndefined();
});

test('schedule and unschedule need no Redis', async () => {
  tl = await createTestLedger();
  const producer = new Producer({ ledger: tl.ledger });
  const name = uniqueQueue('no-redis');
  await producer.schedule({
    name,
    pattern: '0 3 * * *',
    tz: 'Europe/Paris',
    item: { queue: 'q', type: 't', payload: { a: 1 } },
  });
  const s = await tl.ledger.schedules.get(name);
  expect(s).toMatchObject({
    pattern: '0 3 * * *',
    tz: 'Europe/Paris',
    paused: false,
    fires: 0,
    item: { queue: 'q', type: 't', payload: { a: 1 } },
  });
  expect(await producer.unschedule(name)).toBe(true);
  expect(await producer.unschedule(name)).toBe(false);
});

test('a fire that two replicas both process still makes one item (idempotency key per fire time)', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('sched-dup');
  // Simulate what a duplicated delivery would do: the same fire enqueued twice.
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  const fire = { queue, type: 'tick', payload: {}, idempotencyKey: `nightly:${Date.UTC(2026, 10, 30)}` };
  const [a, b] = await Promise.all([producer.enqueue(fire), producer.enqueue(fire)]);
  expect(a?.id).toBe(b?.id);
  expect([a?.duplicate, b?.duplicate].sort()).toEqual([false, true]);
});

test('an item enqueued with a delay is woken by its timer, not by the sweep', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('delayed');
  const startedAt: number[] = [];
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 2,
    pollIntervalMs: 60_000,
    handlers: { later: async () => void startedAt.push(Date.now()) },
  });
  await consumer.start();
  cleanups.push(() => consumer.stop());
  // Let the first sweep pass so only the timer can find the item.
  await waitFor(() => (consumer.counters.sweeps >= 1 ? true : undefined), 5_000, 'first sweep');
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  const enqueuedAt = Date.now();
  await producer.enqueue({ queue, type: 'later', payload: {}, delayMs: 400 });
  await waitFor(() => (startedAt.length === 1 ? true : undefined), 15_000, 'the delayed item to run');
  expect(startedAt[0]! - enqueuedAt).toBeGreaterThanOrEqual(400);
  expect(consumer.counters.sweeps).toBe(1);
});

test('a schedule with neither or both of pattern and everyMs is refused', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  const item = { queue: 'q', type: 't', payload: {} };
  await expect(producer.schedule({ name: 'x', item })).rejects.toThrow(ValidationError);
  await expect(producer.schedule({ name: 'x', item, pattern: '* * * * *', everyMs: 1000 })).rejects.toThrow(
    ValidationError,
  );
  await expect(producer.schedule({ name: 'bad name!', item, everyMs: 1000 })).rejects.toThrow(/name/);
  await expect(producer.schedule({ name: 'x', item, pattern: 'not a cron' })).rejects.toThrow(/pattern/);
  await expect(producer.schedule({ name: 'x', item, pattern: '* * * * *', tz: 'Mars/Olympus' })).rejects.toThrow(/tz/);
  await expect(
    producer.schedule({ name: 'x', item: { ...item, payload: { big: 'x'.repeat(2_000_000) } }, everyMs: 1000 }),
  ).rejects.toThrow(/item.payload/);
  expect(await tl.ledger.schedules.list()).toEqual([]);
});
