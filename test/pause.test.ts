import { beforeEach, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Producer } from '../src/producer/producer.js';
import { LanewakeMetrics } from '../src/supervisor/metrics.js';
import { uniqueQueue } from './support/engine.js';
import { freshQueue } from './support/items.js';
import { waitFor, type TestLedger } from './support/ledger.js';
import { testScope } from './support/scope.js';

// Pausing a queue: a flag the ledger holds, which every claim path checks (docs/design/supervisor.md, Pausing a queue).

const scope = testScope();
let tl: TestLedger;
beforeEach(async () => {
  tl = await scope.ledger();
});

describe('a paused queue at the ledger', () => {
  test('the ledger holds the flag: enqueues commit, sweep signals and explain say so, resume clears it', async () => {
    const queue = freshQueue('paused');
    const other = freshQueue('notpaused');
    await tl.ledger.pause(queue);
    expect(await tl.ledger.pausedQueues([queue, other])).toEqual(new Set([queue]));
    const made = await tl.ledger.enqueueMany(
      Array.from({ length: 4 }, (_, i) => ({ queue, type: 't', payload: { i } })),
    );
    expect(made).toHaveLength(4);
    expect(await tl.ledger.explain(made[0]!.id)).toMatchObject({ code: 'queue_paused', details: { queue } });
    expect((await tl.ledger.sweepSignals([queue, other])).map((s) => [s.queue, s.paused])).toEqual([
      [queue, true],
      [other, false],
    ]);
    await tl.ledger.resume(queue);
    expect(await tl.ledger.pausedQueues([queue])).toEqual(new Set());
    expect((await tl.ledger.explain(made[0]!.id))?.code).not.toBe('queue_paused');
  });

  test('bad input names its field', async () => {
    await expect(tl.ledger.pause('Not A Queue')).rejects.toMatchObject({
      name: 'ValidationError',
      issues: [expect.objectContaining({ field: 'queue' })],
    });
  });
});

describe('a paused queue with consumers', () => {
  test(
    'with Redis: consumers hear the pause at once and start nothing (no ' +
      'claim round, no claim at insert); resumed, everything runs',
    async () => {
      const tw = scope.wake();
      const queue = uniqueQueue('pausewake');
      const started: string[] = [];
      const c = new Consumer({
        ledger: tl.ledger,
        wake: tw.wake,
        queue,
        concurrency: 4,
        pollIntervalMs: 100,
        handlers: { t: async (job) => void started.push(job.id) },
      });
      await scope.start(c);
      const metrics = new LanewakeMetrics({ defaultMetrics: false });
      const unobserve = metrics.observeConsumer(c);
      const series = async (name: string): Promise<string | undefined> =>
        (await metrics.metrics()).split('\n').find((l) => l.startsWith(`${name}{queue="${queue}"}`));
      // What this process's consumers heard, and what the ledger holds (fleet-wide, from the gauges' refresh).
      const pausedSeries = (): Promise<string | undefined> => series('lanewake_consumer_paused');
      const ledgerPaused = async (): Promise<string | undefined> => {
        expect(await metrics.refreshFleetGauges(tl.ledger, { everyMs: 0 })).toBe(true);
        return series('lanewake_queue_paused');
      };
      expect(await pausedSeries()).toMatch(/ 0$/);
      const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
      const heard = new Promise<void>((resolve) =>
        c.on('control', (m: { type: string }) => m.type === 'pause' && resolve()),
      );
      await producer.pause(queue);
      await heard;
      const made = await producer.enqueueMany(
        Array.from({ length: 10 }, (_, i) => ({ queue, type: 't', payload: { i } })),
      );
      await producer.enqueue({ queue, type: 't', payload: { single: true } });
      // Two sweeps have come and gone since: each would have claimed what it found.
      const sweeps = c.counters.sweeps;
      await waitFor(() => c.counters.sweeps >= sweeps + 2 || undefined, 10_000, 'two sweeps');
      expect(started).toEqual([]);
      expect(c.counters.claimedAtInsert).toBe(0);
      expect(await pausedSeries()).toMatch(/ 1$/);
      expect(await ledgerPaused()).toMatch(/ 1$/);
      await producer.resume(queue);
      await waitFor(() => started.length === 11 || undefined, 10_000, 'all eleven, resumed');
      expect(new Set(started)).toEqual(
        new Set([...made.map((m) => m.id), started.find((id) => !made.some((m) => m.id === id))]),
      );
      expect(await pausedSeries()).toMatch(/ 0$/);
      expect(await ledgerPaused()).toMatch(/ 0$/);
      await metrics.releaseFleetGauges(tl.ledger);
      unobserve();
    },
  );

  test("a running lane head's completion claims no successor while paused", async () => {
    const tw = scope.wake();
    const queue = uniqueQueue('pauselane');
    const started: number[] = [];
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const c = new Consumer({
      ledger: tl.ledger,
      wake: tw.wake,
      queue,
      concurrency: 2,
      pollIntervalMs: 100,
      handlers: {
        t: async (job) => {
          started.push((job.payload as { i: number }).i);
          if ((job.payload as { i: number }).i === 0) await held;
        },
      },
    });
    await scope.start(c);
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    await producer.enqueueMany([0, 1, 2].map((i) => ({ queue, type: 't', lane: 'L', payload: { i } })));
    await waitFor(() => started.includes(0) || undefined, 10_000, 'the head to start');
    const heard = new Promise<void>((resolve) =>
      c.on('control', (m: { type: string }) => m.type === 'pause' && resolve()),
    );
    await producer.pause(queue);
    await heard;
    release();
    await waitFor(() => c.counters.completed === 1 || undefined, 10_000, 'the head to complete');
    const sweeps = c.counters.sweeps;
    await waitFor(() => c.counters.sweeps >= sweeps + 2 || undefined, 10_000, 'two sweeps');
    expect(started).toEqual([0]);
    await producer.resume(queue);
    await waitFor(() => started.length === 3 || undefined, 10_000, 'the lane, resumed');
    expect(started).toEqual([0, 1, 2]);
  });

  test("a sweep's read of the flag that began before a pause was heard does not undo it", async () => {
    const tw = scope.wake();
    const queue = uniqueQueue('pausestale');
    // The real ledger, whose answers to the flag's two reads can be held back: a read that began before the
    // pause and is answered after it, as on a loaded server.
    let gate: Promise<void> | undefined;
    let held = 0;
    const ledger = new Proxy(tl.ledger, {
      get(target, prop, receiver) {
        const value: unknown = Reflect.get(target, prop, receiver);
        if ((prop !== 'sweepSignals' && prop !== 'pausedQueues') || typeof value !== 'function')
          return typeof value === 'function' ? value.bind(target) : value;
        return async (...args: unknown[]) => {
          const answer: unknown = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          if (gate !== undefined) {
            held++;
            await gate;
          }
          return answer;
        };
      },
    });
    const started: string[] = [];
    const c = new Consumer({
      ledger,
      wake: tw.wake,
      queue,
      concurrency: 2,
      pollIntervalMs: 100,
      handlers: { t: async (job) => void started.push(job.id) },
    });
    await scope.start(c);
    let open!: () => void;
    gate = new Promise<void>((r) => (open = r));
    await waitFor(() => held > 0 || undefined, 10_000, 'a read of the flag held back');
    const heard = new Promise<void>((resolve) =>
      c.on('control', (m: { type: string }) => m.type === 'pause' && resolve()),
    );
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    await producer.pause(queue);
    await heard;
    expect(c.paused).toBe(true);
    await producer.enqueue({ queue, type: 't', payload: {} });
    gate = undefined;
    open();
    const sweeps = c.counters.sweeps;
    await waitFor(() => c.counters.sweeps >= sweeps + 3 || undefined, 10_000, 'three more sweeps');
    // Not even for a moment: an unpaused consumer would have claimed and started the item.
    expect(started).toEqual([]);
    expect(c.paused).toBe(true);
  });

  test(
    'without Redis: a consumer learns the pause from the ledger ' +
      'at its next sweep, and a restarted one starts paused',
    async () => {
      const queue = uniqueQueue('pausedb');
      const started: string[] = [];
      const make = (): Consumer => {
        const c = new Consumer({
          ledger: tl.ledger,
          queue,
          concurrency: 2,
          pollIntervalMs: 100,
          handlers: { t: async (job) => void started.push(job.id) },
        });
        scope.cleanup(() => c.stop({ drainTimeoutMs: 5_000 }));
        return c;
      };
      const first = make();
      await first.start();
      await tl.ledger.pause(queue);
      const sweeps = first.counters.sweeps;
      await waitFor(() => first.counters.sweeps >= sweeps + 1 || undefined, 10_000, 'a sweep');
      await tl.ledger.enqueueMany(Array.from({ length: 5 }, (_, i) => ({ queue, type: 't', payload: { i } })));
      await first.stop();
      const second = make();
      await second.start();
      const later = second.counters.sweeps;
      await waitFor(
        () => second.counters.sweeps >= later + 2 || undefined,
        10_000,
        'two sweeps of the restarted consumer',
      );
      expect(started).toEqual([]);
      await tl.ledger.resume(queue);
      await waitFor(() => started.length === 5 || undefined, 10_000, 'all five, resumed');
    },
  );
});
