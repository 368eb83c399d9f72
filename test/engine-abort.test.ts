import { sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { Consumer, type ConsumerOptions } from '../src/consumer/consumer.js';
import type { Outcome } from '../src/consumer/job-run.js';
import type { JobContext } from '../src/consumer/types.js';
import { JobAbortedError } from '../src/index.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { history, mustGet } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { captureLog, type CapturedLog } from './support/captured-log.js';

// A handler's signal aborts for one of four reasons. Whatever the handler
// does then (throw the reason, as documented, or return as older examples
// did), the item ends by that reason: never recorded as completed.

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

type Reaction = 'throwIfAborted' | 'return';

interface Run {
  attempt: number;
  reason?: unknown;
}

/** Waits for the signal, then reacts as `reaction` says. */
async function onAbort(ctx: JobContext, reaction: Reaction, run: Run): Promise<string> {
  await new Promise<void>((resolve) => {
    if (ctx.signal.aborted) resolve();
    else ctx.signal.addEventListener('abort', () => resolve(), { once: true });
  });
  run.reason = ctx.signal.reason;
  if (reaction === 'throwIfAborted') ctx.signal.throwIfAborted();
  return 'pretends to be done';
}

interface Setup {
  queue: string;
  log: CapturedLog;
  outcomes: Outcome[];
  runs: Run[];
  enqueue: () => Promise<string>;
}

async function setup(
  handle: (run: Run, ctx: JobContext, nth: number) => Promise<unknown>,
  tuning: Partial<ConsumerOptions> = {},
): Promise<Setup> {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('abort');
  const log = captureLog('info');
  const outcomes: Outcome[] = [];
  const runs: Run[] = [];
  consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 2,
    pollIntervalMs: 500,
    logger: log.logger,
    ...tuning,
    handlers: {
      t: async (job, ctx) => {
        const run: Run = { attempt: job.attempt };
        runs.push(run);
        return handle(run, ctx, runs.length);
      },
    },
  });
  consumer.on('outcome', (_item, o) => outcomes.push(o));
  await consumer.start();
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  return {
    queue,
    log,
    outcomes,
    runs,
    enqueue: async () => (await producer.enqueue({ queue, type: 't', payload: {} })).id,
  };
}

function expectReason(run: Run | undefined, reason: string): void {
  expect(run?.reason).toBeInstanceOf(JobAbortedError);
  expect((run?.reason as JobAbortedError | undefined)?.reason).toBe(reason);
}

/**
 * A handler that returned after its abort is named in a warning with the reason (a thrown reason is the
 * documented way: no warning).
 */
function expectReturnWarning(s: Setup, reaction: Reaction, reason: string): void {
  const warned = s.log.at(40, /returned after its signal aborted/);
  if (reaction === 'return') expect(warned).toEqual([expect.objectContaining({ reason, type: 't', attempt: 1 })]);
  else expect(warned).toEqual([]);
}

describe.each<Reaction>(['throwIfAborted', 'return'])('a handler that reacts to its abort with %s', (reaction) => {
  test('cancel: the item ends cancelled, at the attempt that ran', async () => {
    const s = await setup((run, ctx) => onAbort(ctx, reaction, run), { leaseMs: 1500 });
    const id = await s.enqueue();
    await waitFor(() => s.runs.length === 1 || undefined, 10_000, 'the handler to start');
    expect(await tl!.ledger.cancel(id, 'operator said stop')).toBe('cancel_requested');
    await waitFor(() => s.outcomes.length === 1 || undefined, 10_000, 'an outcome');
    expect(s.outcomes).toEqual(['cancelled']);
    expectReason(s.runs[0], 'cancelled');
    expect(await mustGet(tl!.ledger, id)).toMatchObject({
      state: 'cancelled',
      failureClass: 'cancelled',
      attempt: 1,
      result: null,
    });
    expect((await history(tl!.ledger, id)).map((a) => [a.attempt, a.outcome])).toEqual([[1, 'cancelled']]);
    expectReturnWarning(s, reaction, 'cancelled');
  });

  test('shutdown past the drain: the item goes back to pending without spending an attempt', async () => {
    const s = await setup((run, ctx) => onAbort(ctx, reaction, run));
    const id = await s.enqueue();
    await waitFor(() => s.runs.length === 1 || undefined, 10_000, 'the handler to start');
    await consumer!.stop({ drainTimeoutMs: 100 });
    expect(s.outcomes).toEqual(['released']);
    expectReason(s.runs[0], 'shutdown');
    expect(await mustGet(tl!.ledger, id)).toMatchObject({ state: 'pending', attempt: 0, result: null });
    expect((await history(tl!.ledger, id)).filter((a) => a.outcome !== 'released')).toEqual([]);
    expectReturnWarning(s, reaction, 'shutdown');
  });

  test('deadline: the item is released without spending an attempt and runs again', async () => {
    const s = await setup((run, ctx, nth) => (nth === 1 ? onAbort(ctx, reaction, run) : Promise.resolve('done')), {
      deadlineMs: 300,
      deadlineBackoffMs: 0,
    });
    const id = await s.enqueue();
    await waitFor(() => s.outcomes.includes('completed') || undefined, 15_000, 'the second run to complete');
    expect(s.outcomes).toEqual(['released', 'completed']);
    expect(s.runs.map((r) => r.attempt)).toEqual([1, 1]);
    expectReason(s.runs[0], 'deadline');
    expect(await mustGet(tl!.ledger, id)).toMatchObject({ state: 'completed', attempt: 1, result: 'done' });
    expectReturnWarning(s, reaction, 'deadline');
  });

  test('lease lost: this holder writes nothing; the item stays with the new holder', async () => {
    const thief = 'stolen-token-0000000000';
    const s = await setup(async (run, ctx) => {
      const { ledger } = tl!;
      await sql`UPDATE ${ledger.tables.items} SET lease_token = ${thief}, lease_owner = 'thief'
        WHERE state = 'processing'`.execute(ledger.db);
      expect(await ctx.heartbeat()).toBe(false);
      return onAbort(ctx, reaction, run);
    });
    const id = await s.enqueue();
    await waitFor(() => s.outcomes.length === 1 || undefined, 10_000, 'an outcome');
    expect(s.outcomes).toEqual(['leaseLost']);
    expectReason(s.runs[0], 'lease_lost');
    expect(await mustGet(tl!.ledger, id)).toMatchObject({
      state: 'processing',
      leaseToken: thief,
      attempt: 1,
      result: null,
    });
    expect(await history(tl!.ledger, id)).toEqual([]);
    expectReturnWarning(s, reaction, 'lease_lost');
  });
});

test('the abort reason is a JobAbortedError whose message names the reason', () => {
  const e = new JobAbortedError('deadline');
  expect(e).toBeInstanceOf(Error);
  expect(e.name).toBe('JobAbortedError');
  expect(e.reason).toBe('deadline');
  expect(e.message).toMatch(/deadline/);
});
