// What a handler's return, throw, PermanentError, deadline, Defer and BlockOn, an unknown type, a bad payload, a
// checkpoint and a cancel make of its item.
import { expect, test } from 'vitest';
import { z } from 'zod';
import { BlockOn, Defer, PermanentError } from '../src/consumer/errors.js';
import { defineHandler, type Job, type JobContext } from '../src/consumer/types.js';
import { aborted, attemptsOf, outcomeHarness } from './support/outcome-harness.js';

const { harness } = outcomeHarness();

test('a handler that returns completes the item with its result', async () => {
  const h = await harness({ double: async (job: Job<{ n: number }>) => ({ doubled: job.payload.n * 2, ok: true }) });
  const id = await h.enqueue({ type: 'double', payload: { n: 21 } });
  expect(await h.waitOutcome(id, 'completed')).toEqual(['completed']);
  const item = await h.item(id);
  expect(item).toMatchObject({
    state: 'completed',
    result: { doubled: 42, ok: true },
    attempt: 1,
    lastError: null,
    failureClass: null,
  });
  expect(item.terminalAt).not.toBeNull();
  expect(await attemptsOf(h.ledger, id)).toEqual([]);
  expect(h.consumer.counters.completed).toBe(1);
});

test('a result over the cap ends the item dead, class result_too_large; one under it completes', async () => {
  const h = await harness(
    { emit: async (job: Job<{ size: number }>) => ({ text: 'x'.repeat(job.payload.size) }) },
    {},
    { resultMaxBytes: 100 },
  );
  const big = await h.enqueue({ type: 'emit', payload: { size: 200 } });
  const small = await h.enqueue({ type: 'emit', payload: { size: 10 } });
  expect(await h.waitOutcome(big, 'dead')).toEqual(['dead']);
  expect(await h.waitOutcome(small, 'completed')).toEqual(['completed']);
  expect(await h.item(big)).toMatchObject({
    state: 'dead',
    failureClass: 'result_too_large',
    result: null,
    attempt: 1,
  });
  expect((await h.item(big)).lastError).toMatch(/cap is 100/);
  expect(await h.item(small)).toMatchObject({ state: 'completed', result: { text: 'x'.repeat(10) } });
});

test('PermanentError ends the item dead at once, class permanent (or the class it names)', async () => {
  let calls = 0;
  const h = await harness(
    {
      refuse: async (job: Job<{ custom: boolean }>) => {
        calls++;
        throw job.payload.custom
          ? new PermanentError('malformed order', 'bad_order')
          : new PermanentError('will never work');
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
  expect((await attemptsOf(h.ledger, plain)).map((a) => [a.attempt, a.outcome, a.failureClass])).toEqual([
    [1, 'dead', 'permanent'],
  ]);
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
  expect((await attemptsOf(h.ledger, id)).map((a) => [a.attempt, a.outcome, a.error])).toEqual([
    [1, 'released', 'deadline'],
  ]);
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
  expect((await attemptsOf(h.ledger, id)).map((a) => [a.outcome, a.error])).toEqual([
    ['released', 'not before the window opens'],
  ]);
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

test("a payload the handler's zod schema refuses ends dead, class invalid_payload, the handler not run", async () => {
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
  expect(await h.item(id)).toMatchObject({
    result: { resumedFrom: { step: 3, cursor: 'abc' } },
    checkpoint: { step: 3, cursor: 'abc' },
  });
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
