import { afterEach, expect, test } from 'vitest';
import { runCli } from '../src/cli/program.js';
import { Consumer } from '../src/consumer/consumer.js';
import type { Outcome } from '../src/consumer/job-run.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { history, mustGet } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { redisUrl } from './support/services.js';

// A cancel of a running item reaches its holder on the control stream, so the
// handler's signal aborts in milliseconds. The lease here is 60 s: its first
// renewal (the backstop) is 20 s away, far past every wait below.

const LEASE_MS = 60_000;
/**
 * A deadline under the first renewal (LEASE_MS / 3): what shows the cancel came by the control
 * stream is the order of events.
 */
const PROMPT_MS = 15_000;

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
let consumer: Consumer | undefined;
afterEach(async () => {
  await consumer?.stop({ drainTimeoutMs: 1000 });
  consumer = undefined;
  await tw?.drop();
  await tl?.drop();
  tw = undefined;
  tl = undefined;
});

interface Setup {
  queue: string;
  producer: Producer;
  outcomes: Map<string, Outcome>;
  started: Set<string>;
  /** In the order they happened: `control cancel <ids>` heard on the control stream, `aborted <id>` in the handler. */
  events: string[];
}

/** A consumer whose handler waits on its signal and throws the abort reason, as documented. */
async function setup(): Promise<Setup> {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('cancel');
  const outcomes = new Map<string, Outcome>();
  const started = new Set<string>();
  const events: string[] = [];
  consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 2,
    leaseMs: LEASE_MS,
    pollIntervalMs: 60_000,
    handlers: {
      t: async (job, ctx) => {
        started.add(job.id);
        await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
        events.push(`aborted ${job.id}`);
        ctx.signal.throwIfAborted();
      },
    },
  });
  consumer.on('outcome', (item, o) => outcomes.set(item.id, o));
  consumer.on('control', (m) => void (m.type === 'cancel' && events.push(`control cancel ${m.ids.join(',')}`)));
  await consumer.start();
  // Another process's producer: the cancel must travel through Redis, not in process.
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  return { queue, producer, outcomes, started, events };
}

test(
  'Producer.cancel aborts a running handler within milliseconds, ' +
    'long before the lease is renewed; the item ends cancelled',
  async () => {
    const s = await setup();
    const { id } = await s.producer.enqueue({ queue: s.queue, type: 't', payload: {} });
    await waitFor(() => s.started.has(id) || undefined, 10_000, 'the handler to start');

    expect(await s.producer.cancel(id, 'operator said stop')).toBe('cancel_requested');
    await waitFor(() => s.outcomes.get(id), PROMPT_MS, 'the cancelled outcome');
    // The control stream's message, then the abort it caused: not a lease renewal finding the request.
    expect(s.events).toEqual([`control cancel ${id}`, `aborted ${id}`]);
    expect(s.outcomes.get(id)).toBe('cancelled');
    expect(await mustGet(tl!.ledger, id)).toMatchObject({
      state: 'cancelled',
      failureClass: 'cancelled',
      attempt: 1,
      lastError: 'operator said stop',
    });
    expect((await history(tl!.ledger, id)).map((a) => a.outcome)).toEqual(['cancelled']);
  },
);

test('Producer.cancel of a waiting item cancels it in the ledger at once; of a finished one, nothing', async () => {
  const s = await setup();
  const { id } = await s.producer.enqueue({ queue: s.queue, type: 't', payload: {}, delayMs: 3_600_000 });
  expect(await s.producer.cancel(id)).toBe('cancelled');
  expect(await mustGet(tl!.ledger, id)).toMatchObject({ state: 'cancelled' });
  expect(await s.producer.cancel(id)).toBe('not_cancellable');
  expect(await s.producer.cancel('no-such-item')).toBe('not_found');
});

test('lanewake cancel with a Redis URL aborts the running handler promptly', async () => {
  const s = await setup();
  const { id } = await s.producer.enqueue({ queue: s.queue, type: 't', payload: {} });
  await waitFor(() => s.started.has(id) || undefined, 10_000, 'the handler to start');

  let out = '';
  let err = '';
  const code = await runCli(
    ['--database-url', tl!.url, '--redis-url', redisUrl(), '--redis-key-prefix', tw!.keyPrefix, 'cancel', id],
    { out: (t) => (out += t), err: (t) => (err += t), columns: 200 },
  );
  expect({ code, err }).toEqual({ code: 0, err: '' });
  expect(out).toMatch(/^cancel_requested: /);
  expect(out).not.toMatch(/renew/);
  await waitFor(() => s.outcomes.get(id), PROMPT_MS, 'the cancelled outcome');
  expect(s.events).toEqual([`control cancel ${id}`, `aborted ${id}`]);
  expect(await mustGet(tl!.ledger, id)).toMatchObject({ state: 'cancelled' });
});

test('a cancel message when the ledger holds no cancel request aborts nothing: the ledger decides', async () => {
  const s = await setup();
  const { id } = await s.producer.enqueue({ queue: s.queue, type: 't', payload: {} });
  await waitFor(() => s.started.has(id) || undefined, 10_000, 'the handler to start');
  const leaseBefore = (await mustGet(tl!.ledger, id)).leaseUntil?.getTime() ?? 0;
  expect(await tw!.remote().publishControl(s.queue, { type: 'cancel', ids: [id] })).toBe(true);
  // The holder asks the ledger (a renewal, which moves the lease on) and the ledger says keep going.
  await waitFor(
    async () => ((await mustGet(tl!.ledger, id)).leaseUntil?.getTime() ?? 0) > leaseBefore || undefined,
    PROMPT_MS,
    'the holder to check with the ledger',
  );
  expect(s.events).toEqual([`control cancel ${id}`]);
  expect(s.outcomes.size).toBe(0);
  expect(await mustGet(tl!.ledger, id)).toMatchObject({ state: 'processing', cancelRequested: false });
  // A real cancel after it still takes effect at once.
  expect(await s.producer.cancel(id)).toBe('cancel_requested');
  await waitFor(() => s.outcomes.get(id), PROMPT_MS, 'the cancelled outcome');
  expect(s.events).toEqual([`control cancel ${id}`, `control cancel ${id}`, `aborted ${id}`]);
  expect(await mustGet(tl!.ledger, id)).toMatchObject({ state: 'cancelled' });
});

test('cancelling an item in the prefetch buffer takes effect once it starts, not at its first renewal', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('cancel-buffered');
  const outcomes = new Map<string, Outcome>();
  const started = new Set<string>();
  consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 1,
    prefetch: 10,
    leaseMs: LEASE_MS,
    pollIntervalMs: 100,
    handlers: {
      fast: async () => 'ok',
      wait: async (job, ctx) => {
        started.add(job.id);
        await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
        ctx.signal.throwIfAborted();
      },
    },
  });
  consumer.on('outcome', (item, o) => outcomes.set(item.id, o));
  await consumer.start();
  const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
  // Instant handlers first, so the consumer sizes a prefetch buffer.
  const fast = await producer.enqueueMany(Array.from({ length: 50 }, () => ({ queue, type: 'fast', payload: {} })));
  await waitFor(() => fast.every((r) => outcomes.get(r.id) === 'completed') || undefined, 10_000, 'the fast items');
  const pair = await producer.enqueueMany([
    { queue, type: 'wait', payload: {} },
    { queue, type: 'wait', payload: {} },
  ]);
  // One slot: whichever starts holds it, the other is claimed into the buffer behind it.
  const running = await waitFor(() => pair.find((r) => started.has(r.id))?.id, 10_000, 'one of them to start');
  const buffered = pair.find((r) => r.id !== running)!.id;
  await waitFor(
    async () => (await mustGet(tl!.ledger, buffered)).state === 'processing' || undefined,
    10_000,
    'the other to be claimed into the buffer',
  );
  expect(started.has(buffered)).toBe(false);

  expect(await producer.cancel(buffered)).toBe('cancel_requested');
  expect(await producer.cancel(running)).toBe('cancel_requested');
  await waitFor(() => outcomes.get(buffered), PROMPT_MS, 'the buffered item to end');
  // The slot frees when a handler settles, before its outcome is written: the two outcomes may land in either order.
  await waitFor(() => outcomes.get(running), PROMPT_MS, 'the running item to end');
  expect(outcomes.get(running)).toBe('cancelled');
  expect(outcomes.get(buffered)).toBe('cancelled');
  expect(await mustGet(tl.ledger, buffered)).toMatchObject({ state: 'cancelled', attempt: 1 });
});
