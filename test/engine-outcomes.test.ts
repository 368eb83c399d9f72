import { afterEach, expect, test } from 'vitest';
import { z } from 'zod';
import { Consumer, type ConsumerOptions } from '../src/consumer/consumer.js';
import { BlockOn, Defer, PermanentError } from '../src/consumer/errors.js';
import type { Outcome } from '../src/consumer/job-run.js';
import { defineHandler, type HandlerEntry, type Job, type JobContext } from '../src/consumer/types.js';
import type { LedgerConfigInput } from '../src/ledger/config.js';
import type { EnqueueInput, Ledger } from '../src/ledger/ledger.js';
import type { WorkItem } from '../src/ledger/types.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { onEveryStatement } from './support/mysql-statements.js';

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
let cleanups: (() => Promise<unknown> | void)[] = [];

afterEach(async () => {
  for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
  cleanups = [];
  await tw?.drop();
  await tl?.drop();
  tw = undefined;
  tl = undefined;
});

type ConsumerTuning = Omit<ConsumerOptions, 'ledger' | 'wake' | 'handlers' | 'queue'>;

interface Harness {
  ledger: Ledger;
  consumer: Consumer;
  producer: Producer;
  queue: string;
  /** Outcomes per item id, in the order the consumer wrote them. */
  outcomes: Map<string, Outcome[]>;
  enqueue: (input: Omit<EnqueueInput, 'queue'>) => Promise<string>;
  /** Waits until `id` has had `outcome`; resolves with all its outcomes so far. */
  waitOutcome: (id: string, outcome: Outcome, timeoutMs?: number) => Promise<Outcome[]>;
  item: (id: string) => Promise<WorkItem>;
}

/** A ledger and wake channel of the test's own, one started consumer on a fresh queue, and a producer. */
async function harness(handlers: Record<string, HandlerEntry>, tuning: ConsumerTuning = {}, ledgerConfig: Partial<LedgerConfigInput> = {}): Promise<Harness> {
  tl = await createTestLedger(ledgerConfig);
  tw = createTestWake();
  const ledger = tl.ledger;
  const queue = uniqueQueue('outcome');
  const consumer = new Consumer({ ledger, wake: tw.wake, queue, concurrency: 4, pollIntervalMs: 1000, ...tuning, handlers });
  const outcomes = new Map<string, Outcome[]>();
  consumer.on('outcome', (item, outcome) => outcomes.set(item.id, [...(outcomes.get(item.id) ?? []), outcome]));
  cleanups.push(() => consumer.stop({ drainTimeoutMs: 1000 }));
  await consumer.start();
  const producer = new Producer({ ledger, wake: tw.wake });
  return {
    ledger,
    consumer,
    producer,
    queue,
    outcomes,
    enqueue: async (input) => (await producer.enqueue({ ...input, queue })).id,
    waitOutcome: (id, outcome, timeoutMs = 15_000) =>
      waitFor(() => (outcomes.get(id)?.includes(outcome) ? outcomes.get(id) : undefined), timeoutMs, `${id}: ${outcome}`),
    item: async (id) => {
      const item = await ledger.get(id);
      if (!item) throw new Error(`no item ${id}`);
      return item;
    },
  };
}

async function attemptsOf(ledger: Ledger, id: string) {
  const r = await ledger.inspect(id);
  if (!r) throw new Error(`no item ${id}`);
  return r.attempts;
}

/** Resolves when `signal` aborts, with the abort reason's message. */
function aborted(signal: AbortSignal): Promise<string> {
  return new Promise((resolve) => {
    const done = () => resolve(String((signal.reason as Error | undefined)?.message ?? signal.reason));
    if (signal.aborted) done();
    else signal.addEventListener('abort', done, { once: true });
  });
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test('a handler that returns completes the item with its result', async () => {
  const h = await harness({ double: async (job: Job<{ n: number }>) => ({ doubled: job.payload.n * 2, ok: true }) });
  const id = await h.enqueue({ type: 'double', payload: { n: 21 } });
  expect(await h.waitOutcome(id, 'completed')).toEqual(['completed']);
  const item = await h.item(id);
  expect(item).toMatchObject({ state: 'completed', result: { doubled: 42, ok: true }, attempt: 1, lastError: null, failureClass: null });
  expect(item.terminalAt).not.toBeNull();
  expect(await attemptsOf(h.ledger, id)).toEqual([]);
  expect(h.consumer.counters.completed).toBe(1);
});

test('a result over the cap ends the item dead, class result_too_large; one under it completes', async () => {
  const h = await harness({ emit: async (job: Job<{ size: number }>) => ({ text: 'x'.repeat(job.payload.size) }) }, {}, { resultMaxBytes: 100 });
  const big = await h.enqueue({ type: 'emit', payload: { size: 200 } });
  const small = await h.enqueue({ type: 'emit', payload: { size: 10 } });
  expect(await h.waitOutcome(big, 'dead')).toEqual(['dead']);
  expect(await h.waitOutcome(small, 'completed')).toEqual(['completed']);
  expect(await h.item(big)).toMatchObject({ state: 'dead', failureClass: 'result_too_large', result: null, attempt: 1 });
  expect((await h.item(big)).lastError).toMatch(/cap is 100/);
  expect(await h.item(small)).toMatchObject({ state: 'completed', result: { text: 'x'.repeat(10) } });
});

test('PermanentError ends the item dead at once, class permanent (or the class it names)', async () => {
  let calls = 0;
  const h = await harness(
    {
      refuse: async (job: Job<{ custom: boolean }>) => {
        calls++;
        throw job.payload.custom ? new PermanentError('malformed order', 'bad_order') : new PermanentError('will never work');
      },
    },
    { backoff: { baseMs: 10, factor: 1, jitter: 0, maxMs: 10 } },
  );
  const plain = await h.enqueue({ type: 'refuse', payload: { custom: false }, maxAttempts: 5 });
  const custom = await h.enqueue({ type: 'refuse', payload: { custom: true }, maxAttempts: 5 });
  expect(await h.waitOutcome(plain, 'dead')).toEqual(['dead']);
  expect(await h.waitOutcome(custom, 'dead')).toEqual(['dead']);
  expect(calls).toBe(2);
  const p = await h.item(plain);
  expect(p).toMatchObject({ state: 'dead', failureClass: 'permanent', attempt: 1 });
  expect(p.lastError).toMatch(/will never work/);
  expect((await attemptsOf(h.ledger, plain)).map((a) => [a.attempt, a.outcome, a.failureClass])).toEqual([[1, 'dead', 'permanent']]);
  expect(await h.item(custom)).toMatchObject({ state: 'dead', failureClass: 'bad_order', attempt: 1 });
});

test('a plain throw is retried after the backoff, with its attempt on record', async () => {
  const BACKOFF_MS = 300;
  const starts: { attempt: number; at: number }[] = [];
  let thrownAt = 0;
  const h = await harness(
    {
      flaky: async (job: Job<unknown>) => {
        starts.push({ attempt: job.attempt, at: Date.now() });
        if (job.attempt === 1) {
          thrownAt = Date.now();
          throw new Error('transient failure #1');
        }
        return 'second time lucky';
      },
    },
    // The retry is due long before the next sweep: a timer wake-up must bring it back.
    { backoff: { baseMs: BACKOFF_MS, factor: 1, jitter: 0, maxMs: BACKOFF_MS }, pollIntervalMs: 30_000 },
  );
  const id = await h.enqueue({ type: 'flaky', payload: {} });
  expect(await h.waitOutcome(id, 'completed', 10_000)).toEqual(['retried', 'completed']);
  expect(starts.map((s) => s.attempt)).toEqual([1, 2]);
  expect(starts[1]!.at - thrownAt).toBeGreaterThanOrEqual(BACKOFF_MS);

  const item = await h.item(id);
  expect(item).toMatchObject({ state: 'completed', result: 'second time lucky', attempt: 2 });
  const history = await attemptsOf(h.ledger, id);
  expect(history.map((a) => [a.attempt, a.outcome, a.failureClass, a.worker])).toEqual([
    [1, 'retried', 'error', h.consumer.name],
    [2, 'completed', null, h.consumer.name],
  ]);
  expect(history[0]!.error).toMatch(/transient failure #1/);
  // On the ledger's clock: the second attempt was claimed no earlier than the backoff after the first ended.
  // (1 ms of slack: the row's end time is taken a statement after the due time.)
  expect(item.startedAt!.getTime()).toBeGreaterThanOrEqual(history[0]!.endedAt.getTime() + BACKOFF_MS - 1);
  expect(h.consumer.counters).toMatchObject({ retried: 1, completed: 1, dead: 0 });
});

test('a spent attempt budget ends the item dead with the failure class', async () => {
  let calls = 0;
  const h = await harness(
    {
      doomed: async (job: Job<unknown>) => {
        calls++;
        throw new Error(`failure on attempt ${job.attempt}`);
      },
    },
    { backoff: { baseMs: 50, factor: 1, jitter: 0, maxMs: 50 } },
  );
  const id = await h.enqueue({ type: 'doomed', payload: {}, maxAttempts: 2 });
  expect(await h.waitOutcome(id, 'dead')).toEqual(['retried', 'dead']);
  expect(calls).toBe(2);
  const item = await h.item(id);
  expect(item).toMatchObject({ state: 'dead', failureClass: 'error', attempt: 2, maxAttempts: 2 });
  expect(item.lastError).toMatch(/failure on attempt 2/);
  expect((await attemptsOf(h.ledger, id)).map((a) => [a.attempt, a.outcome, a.failureClass])).toEqual([
    [1, 'retried', 'error'],
    [2, 'dead', 'error'],
  ]);
});

test('a deadline aborts the handler and releases the item without spending an attempt', async () => {
  const seen: { attempt: number; abortReason?: string }[] = [];
  const h = await harness(
    {
      slow: async (job: Job<unknown>, ctx: JobContext) => {
        const run: { attempt: number; abortReason?: string } = { attempt: job.attempt };
        seen.push(run);
        if (seen.length === 1) {
          run.abortReason = await aborted(ctx.signal);
          throw ctx.signal.reason;
        }
        return 'in time';
      },
    },
    { deadlineMs: 200, deadlineBackoffMs: 100 },
  );
  const id = await h.enqueue({ type: 'slow', payload: {}, maxAttempts: 1 });
  expect(await h.waitOutcome(id, 'completed')).toEqual(['released', 'completed']);
  expect(seen).toEqual([{ attempt: 1, abortReason: expect.stringMatching(/deadline/) }, { attempt: 1 }]);
  // maxAttempts 1: had the deadline spent the attempt, there would have been no second run.
  expect(await h.item(id)).toMatchObject({ state: 'completed', result: 'in time', attempt: 1 });
  expect((await attemptsOf(h.ledger, id)).map((a) => [a.attempt, a.outcome, a.error])).toEqual([[1, 'released', 'deadline']]);
  expect(h.consumer.counters).toMatchObject({ released: 1, completed: 1, retried: 0 });
});

test('Defer(runAt) releases the item until runAt without spending an attempt', async () => {
  const runs: { attempt: number; at: number }[] = [];
  let runAt = 0;
  const h = await harness(
    {
      later: async (job: Job<unknown>) => {
        runs.push({ attempt: job.attempt, at: Date.now() });
        if (runs.length === 1) {
          runAt = Date.now() + 300;
          throw Defer(new Date(runAt), 'not before the window opens');
        }
        return 'now';
      },
    },
    { pollIntervalMs: 30_000 },
  );
  const id = await h.enqueue({ type: 'later', payload: {}, maxAttempts: 1 });
  expect(await h.waitOutcome(id, 'completed', 10_000)).toEqual(['released', 'completed']);
  expect(runs.map((r) => r.attempt)).toEqual([1, 1]);
  expect(runs[1]!.at).toBeGreaterThanOrEqual(runAt);
  expect(await h.item(id)).toMatchObject({ state: 'completed', result: 'now', attempt: 1 });
  expect((await attemptsOf(h.ledger, id)).map((a) => [a.outcome, a.error])).toEqual([['released', 'not before the window opens']]);
});

test('BlockOn parks the item and its lane until producer.wakeDependency, then it completes', async () => {
  const runs: string[] = [];
  let blockedOnce = false;
  const h = await harness({
    gated: async (job: Job<{ name: string }>) => {
      runs.push(job.payload.name);
      if (job.payload.name === 'head' && !blockedOnce) {
        blockedOnce = true;
        throw BlockOn('dep-key', { maxWaitMs: 60_000 });
      }
      return job.payload.name;
    },
  });
  const head = await h.enqueue({ type: 'gated', lane: 'L', payload: { name: 'head' }, maxAttempts: 1 });
  const follower = await h.enqueue({ type: 'gated', lane: 'L', payload: { name: 'follower' } });
  await h.waitOutcome(head, 'blocked');
  const parked = await h.item(head);
  expect(parked).toMatchObject({ state: 'blocked', dependencyKey: 'dep-key', attempt: 0 });
  expect(parked.blockExpiresAt).not.toBeNull();
  // The lane waits behind its blocked head.
  expect(await h.item(follower)).toMatchObject({ state: 'pending', isHead: false, attempt: 0 });

  expect(await h.producer.wakeDependency('dep-key')).toBe(1);
  await h.waitOutcome(follower, 'completed');
  expect(h.outcomes.get(head)).toEqual(['blocked', 'completed']);
  expect(runs).toEqual(['head', 'head', 'follower']);
  expect(await h.item(head)).toMatchObject({ state: 'completed', result: 'head', attempt: 1 });
  expect(await h.item(follower)).toMatchObject({ state: 'completed', result: 'follower' });
  expect(await h.producer.wakeDependency('dep-key')).toBe(0);
});

test("with unknownType: 'dead' an item whose type has no handler ends dead, class unowned", async () => {
  const h = await harness({ known: async () => 'fine' }, { unknownType: 'dead' });
  const stranger = await h.enqueue({ type: 'nobody-handles-this', payload: {} });
  const known = await h.enqueue({ type: 'known', payload: {} });
  expect(await h.waitOutcome(stranger, 'dead')).toEqual(['dead']);
  await h.waitOutcome(known, 'completed');
  const item = await h.item(stranger);
  expect(item).toMatchObject({ state: 'dead', failureClass: 'unowned' });
  expect(item.lastError).toMatch(/nobody-handles-this/);
});

test("a payload failing the handler's zod schema ends dead, class invalid_payload, without running the handler", async () => {
  const handled: number[] = [];
  const h = await harness({
    typed: defineHandler({
      schema: z.object({ n: z.number().int() }),
      handle: async (job) => {
        handled.push(job.payload.n);
        return job.payload.n + 1;
      },
    }),
  });
  const bad = await h.enqueue({ type: 'typed', payload: { n: 'seven' } });
  const good = await h.enqueue({ type: 'typed', payload: { n: 7 } });
  expect(await h.waitOutcome(bad, 'dead')).toEqual(['dead']);
  expect(await h.waitOutcome(good, 'completed')).toEqual(['completed']);
  const item = await h.item(bad);
  expect(item).toMatchObject({ state: 'dead', failureClass: 'invalid_payload' });
  expect(item.lastError).toMatch(/\bn\b/);
  expect(handled).toEqual([7]);
  expect(await h.item(good)).toMatchObject({ result: 8 });
});

test('ctx.checkpoint saves progress that the next attempt sees as job.checkpoint', async () => {
  const seen: unknown[] = [];
  const saved: boolean[] = [];
  const h = await harness(
    {
      resumable: async (job: Job<unknown>, ctx: JobContext) => {
        seen.push(job.checkpoint);
        if (job.attempt === 1) {
          saved.push(await ctx.checkpoint({ step: 3, cursor: 'abc' }));
          throw new Error('crashed after step 3');
        }
        return { resumedFrom: job.checkpoint };
      },
    },
    { backoff: { baseMs: 50, factor: 1, jitter: 0, maxMs: 50 } },
  );
  const id = await h.enqueue({ type: 'resumable', payload: {} });
  expect(await h.waitOutcome(id, 'completed')).toEqual(['retried', 'completed']);
  expect(saved).toEqual([true]);
  expect(seen).toEqual([null, { step: 3, cursor: 'abc' }]);
  expect(await h.item(id)).toMatchObject({ result: { resumedFrom: { step: 3, cursor: 'abc' } }, checkpoint: { step: 3, cursor: 'abc' } });
});

test('cancelling a running item aborts its handler through the lease renewal and ends it cancelled', async () => {
  let abortReason: string | undefined;
  const h = await harness(
    {
      long: async (_job: Job<unknown>, ctx: JobContext) => {
        abortReason = await aborted(ctx.signal);
        throw ctx.signal.reason;
      },
    },
    { leaseMs: 600 },
  );
  const started = new Promise<string>((resolve) => h.consumer.once('started', (item) => resolve(item.id)));
  const id = await h.enqueue({ type: 'long', payload: {} });
  expect(await started).toBe(id);
  expect(await h.ledger.cancel(id, 'operator said stop')).toBe('cancel_requested');
  expect(await h.waitOutcome(id, 'cancelled', 10_000)).toEqual(['cancelled']);
  expect(abortReason).toMatch(/cancel/);
  expect(await h.item(id)).toMatchObject({ state: 'cancelled', failureClass: 'cancelled' });
  expect(h.consumer.counters.cancelled).toBe(1);
});

test('graceful stop lets a handler that finishes within the drain complete', async () => {
  let finished = false;
  const h = await harness({
    steady: async () => {
      await sleep(300);
      finished = true;
      return 'drained';
    },
  });
  const started = new Promise<string>((resolve) => h.consumer.once('started', (item) => resolve(item.id)));
  const id = await h.enqueue({ type: 'steady', payload: {} });
  await started;
  const stopping = h.consumer.stop({ drainTimeoutMs: 10_000 });
  expect(finished).toBe(false);
  await stopping;
  expect(finished).toBe(true);
  expect(h.outcomes.get(id)).toEqual(['completed']);
  expect(await h.item(id)).toMatchObject({ state: 'completed', result: 'drained', attempt: 1 });
});

test('graceful stop past the drain aborts a handler; one that settles is released without spending an attempt', async () => {
  let abortReason: string | undefined;
  const h = await harness({
    stubborn: async (_job: Job<unknown>, ctx: JobContext) => {
      abortReason = await aborted(ctx.signal);
      throw ctx.signal.reason;
    },
  });
  const started = new Promise<string>((resolve) => h.consumer.once('started', (item) => resolve(item.id)));
  const id = await h.enqueue({ type: 'stubborn', payload: {} });
  await started;
  await h.consumer.stop({ drainTimeoutMs: 200 });
  expect(abortReason).toMatch(/shutdown/);
  expect(h.outcomes.get(id)).toEqual(['released']);
  const item = await h.item(id);
  expect(item).toMatchObject({ state: 'pending', attempt: 0, leaseUntil: null });
  expect((await attemptsOf(h.ledger, id)).map((a) => [a.outcome, a.error])).toEqual([['released', 'shutdown']]);
});

test('graceful stop never releases a handler that ignores its abort: the item stays processing until its lease expires', async () => {
  let letGo: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (letGo = resolve));
  cleanups.push(() => letGo());
  let abortSeen = false;
  const h = await harness(
    {
      deaf: async (_job: Job<unknown>, ctx: JobContext) => {
        ctx.signal.addEventListener('abort', () => (abortSeen = true));
        await gate; // ignores the signal
        return 'too late';
      },
    },
    { leaseMs: 1500, abortGraceMs: 200 },
  );
  const started = new Promise<{ id: string; token: string }>((resolve) =>
    h.consumer.once('started', (item) => resolve({ id: item.id, token: item.leaseToken })),
  );
  const id = await h.enqueue({ type: 'deaf', payload: {} });
  const claim = await started;
  expect(claim.id).toBe(id);
  await h.consumer.stop({ drainTimeoutMs: 200 });
  expect(abortSeen).toBe(true);
  expect(h.outcomes.get(id)).toEqual(['abandoned']);
  expect(h.consumer.counters).toMatchObject({ abandoned: 1, released: 0, completed: 0 });

  // Not released: still processing under the same claim, its lease still running.
  const held = await h.item(id);
  expect(held).toMatchObject({ state: 'processing', leaseToken: claim.token, leaseOwner: h.consumer.name, attempt: 1 });
  expect(held.leaseUntil!.getTime()).toBeGreaterThan((await h.ledger.now()).getTime());
  expect(await attemptsOf(h.ledger, id)).toEqual([]);

  // Later the lease runs out and the item can be reclaimed (the expired attempt on record).
  await waitFor(async () => (await h.ledger.reclaimExpired({ queue: h.queue })).reclaimed.includes(id) || undefined, 10_000, 'the lease to expire');
  expect(await h.item(id)).toMatchObject({ state: 'pending', attempt: 1, failureClass: 'lease_expired' });
  expect((await attemptsOf(h.ledger, id)).map((a) => [a.attempt, a.outcome, a.worker])).toEqual([[1, 'lease_expired', h.consumer.name]]);
});

test('a handler that runs for several leases keeps its item: the consumer\'s clock renews the lease', async () => {
  const LEASE_MS = 300;
  let startedAt = 0;
  const h = await harness(
    {
      long: async () => {
        startedAt = Date.now();
        await sleep(4 * LEASE_MS);
        return 'kept';
      },
    },
    // Sweeping (and reclaiming expired leases) every 100 ms: an unrenewed lease would be taken back.
    { leaseMs: LEASE_MS, pollIntervalMs: 100 },
  );
  const id = await h.enqueue({ type: 'long', payload: {} });
  expect(await h.waitOutcome(id, 'completed', 10_000)).toEqual(['completed']);
  expect(Date.now() - startedAt).toBeGreaterThanOrEqual(4 * LEASE_MS);
  expect(await h.item(id)).toMatchObject({ state: 'completed', result: 'kept', attempt: 1 });
  // Nothing but the run that kept its lease. On a loaded TiDB a claim can take most of a 300 ms lease
  // to come back, and the consumer then hands the item back unstarted (no attempt spent) and claims it
  // again: that history is the prefetch rule's, not a lease lost to a missed renewal.
  const history = await attemptsOf(h.ledger, id);
  expect(history.filter((a) => !(a.outcome === 'released' && a.error === 'prefetch wait exceeded a third of the lease'))).toEqual([]);
  expect(h.consumer.counters).toMatchObject({ completed: 1, leaseLost: 0 });
});

test('several long handlers have their leases renewed together: one statement per tick of the clock, not one per item', async () => {
  const LEASE_MS = 300;
  const renewals: number[] = [];
  const stopCounting = onEveryStatement((text) => {
    const m = /^UPDATE \S+ SET lease_until = .* WHERE id IN \((.*?)\) AND lease_token IN/s.exec(text);
    if (m) renewals.push(m[1]!.split(',').length);
  });
  cleanups.push(stopCounting);
  const h = await harness({ long: async () => void (await sleep(6 * LEASE_MS)) }, { leaseMs: LEASE_MS, pollIntervalMs: 100, concurrency: 4 });
  // The leases are taken at different moments, as a claim round, an offer and a lane's successor take
  // them: one item first, the other three once it has run for a fifth of a lease.
  const firstStarted = new Promise<void>((resolve) => h.consumer.once('started', () => resolve()));
  const first = await h.enqueue({ type: 'long', payload: {} });
  await firstStarted;
  // Not a wait for something to happen: the scenario is two leases a fifth of a lease apart.
  await sleep(LEASE_MS / 5);
  const rest = (await h.producer.enqueueMany(Array.from({ length: 3 }, () => ({ queue: h.queue, type: 'long', payload: {} })))).map((r) => r.id);
  for (const id of [first, ...rest]) expect(await h.waitOutcome(id, 'completed', 10_000)).toEqual(['completed']);
  expect(h.consumer.counters).toMatchObject({ completed: 4, leaseLost: 0 });
  const renewed = renewals.reduce((a, b) => a + b, 0);
  // Each item was renewed several times (6 leases long, renewed every third of one)…
  expect(renewed).toBeGreaterThanOrEqual(4 * 4);
  // …and after the first renewal the four went out together: far fewer statements than renewals.
  expect(renewals.length * 3).toBeLessThanOrEqual(renewed);
});

test('a deadline long enough to be kept on the consumer\'s clock still aborts the handler and releases the item', async () => {
  // leaseMs 240: the clock ticks every 20 ms, so a 500 ms deadline (25 ticks) has no timer of its own.
  const DEADLINE_MS = 500;
  const seen: { attempt: number; abortReason?: string; afterMs?: number }[] = [];
  const h = await harness(
    {
      slow: async (job: Job<unknown>, ctx: JobContext) => {
        const run: { attempt: number; abortReason?: string; afterMs?: number } = { attempt: job.attempt };
        seen.push(run);
        if (seen.length === 1) {
          const t0 = Date.now();
          run.abortReason = await aborted(ctx.signal);
          run.afterMs = Date.now() - t0;
          throw ctx.signal.reason;
        }
        return 'in time';
      },
    },
    { leaseMs: 240, deadlineMs: DEADLINE_MS, deadlineBackoffMs: 50 },
  );
  const id = await h.enqueue({ type: 'slow', payload: {}, maxAttempts: 1 });
  expect(await h.waitOutcome(id, 'completed')).toEqual(['released', 'completed']);
  expect(seen[0]).toMatchObject({ attempt: 1, abortReason: expect.stringMatching(/deadline/) });
  expect(seen[0]!.afterMs).toBeGreaterThanOrEqual(DEADLINE_MS - 5);
  expect(await h.item(id)).toMatchObject({ state: 'completed', result: 'in time', attempt: 1 });
  expect(h.consumer.counters).toMatchObject({ released: 1, completed: 1, retried: 0 });
});
