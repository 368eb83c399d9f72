import { sql } from 'kysely';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { z } from 'zod';
import { BatchCompleter } from '../src/consumer/completer.js';
import { JobAbortedError } from '../src/consumer/errors.js';
import { runJob, type JobRunDeps, type Outcome, type RunningJob } from '../src/consumer/job-run.js';
import { LeaseKeeper } from '../src/consumer/lease-keeper.js';
import type { CompletionLedger, LeaseLedger } from '../src/consumer/ledger-port.js';
import { consumerSettingsSchema, type ConsumerSettingsInput } from '../src/consumer/options.js';
import type { JobContext, RegisteredHandler } from '../src/consumer/types.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { captureLog, type CapturedLog } from './support/captured-log.js';
import { claimOne, freshQueue, history, mustGet, withForeignToken } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// One item's run on its own (no consumer): pre-checks, the handler's run,
// and the outcome written from how it settled, against the real ledger.

let tl: TestLedger;
beforeAll(async () => {
  tl = await createTestLedger();
});
afterAll(async () => {
  await tl?.drop();
});

interface Harness {
  run: RunningJob;
  log: CapturedLog;
  settled: RunningJob[];
  delayed: number[];
  /** Batches the completer handed the ledger (the real ledger still writes them). */
  completions: number[];
  done: Promise<Outcome>;
}

function start(
  item: ClaimedItem,
  handlers: Record<string, RegisteredHandler>,
  settings: Partial<ConsumerSettingsInput> = {},
): Harness {
  const log = captureLog('info');
  const settled: RunningJob[] = [];
  const delayed: number[] = [];
  const completions: number[] = [];
  const real = tl.ledger;
  const completionLedger: CompletionLedger = {
    completeManyClaimingNext: (entries, next) => {
      completions.push(entries.length);
      return real.completeManyClaimingNext(entries, next);
    },
  };
  const deps: JobRunDeps<Record<string, never>> = {
    ledger: real,
    completer: new BatchCompleter(completionLedger),
    settings: consumerSettingsSchema.parse({ queue: item.queue, ...settings }),
    handlers: new Map(Object.entries(handlers)),
    log: log.logger,
    onSettled: (r) => settled.push(r),
    onDelayed: (_item, delayMs) => delayed.push(delayMs),
    unownedTypesSeen: new Set(),
  };
  const run = runJob(deps, item);
  run.start();
  return { run, log, settled, delayed, completions, done: run.done };
}

async function claimed(payload: unknown = {}, type = 't', lane?: string): Promise<ClaimedItem> {
  const queue = freshQueue('job-run');
  await tl.ledger.enqueue({ queue, type, payload, ...(lane ? { lane } : {}) });
  return claimOne(tl.ledger, queue);
}

/** Resolves once the signal has aborted (at once if it already has). */
function aborted(ctx: JobContext): Promise<void> {
  return new Promise((resolve) => {
    if (ctx.signal.aborted) resolve();
    else ctx.signal.addEventListener('abort', () => resolve(), { once: true });
  });
}

test('pre-check: a payload the schema refuses ends dead, invalid_payload, without running the handler', async () => {
  const item = await claimed({ n: 'not a number' });
  let ran = false;
  const h = start(item, {
    t: {
      schema: z.object({ n: z.number() }),
      handle: async () => {
        ran = true;
      },
    },
  });
  expect(await h.done).toBe('dead');
  expect(ran).toBe(false);
  expect(h.settled).toEqual([h.run]);
  expect(h.run.handlerMs).toBeUndefined();
  expect(await mustGet(tl.ledger, item.id)).toMatchObject({ state: 'dead', failureClass: 'invalid_payload' });
  expect(h.log.at(40, /payload does not match the handler's schema: dead/)).toHaveLength(1);
});

test('pre-check: no handler here for the type releases the item within the grace, spending no attempt', async () => {
  const item = await claimed({}, 'nobody-handles-this');
  const h = start(item, { t: { handle: async () => 'x' } });
  expect(await h.done).toBe('released');
  expect(h.settled).toEqual([h.run]);
  expect(h.delayed).toEqual([5_000]);
  expect(await mustGet(tl.ledger, item.id)).toMatchObject({ state: 'pending', attempt: 0 });
});

test(
  'the run: a short deadline aborts the signal with reason ' +
    'deadline; the item is released without spending an attempt',
  async () => {
    const item = await claimed();
    let reason: unknown;
    const h = start(
      item,
      {
        t: {
          deadlineMs: 100,
          handle: async (_job, ctx) => {
            await aborted(ctx);
            reason = ctx.signal.reason;
            ctx.signal.throwIfAborted();
          },
        },
      },
      { deadlineBackoffMs: 60_000 },
    );
    expect(await h.done).toBe('released');
    expect(reason).toBeInstanceOf(JobAbortedError);
    expect((reason as JobAbortedError).reason).toBe('deadline');
    expect(h.run.handlerMs).toBeGreaterThanOrEqual(90);
    expect(h.delayed).toEqual([60_000]);
    expect(await mustGet(tl.ledger, item.id)).toMatchObject({ state: 'pending', attempt: 0 });
  },
);

test('the run: a handler ignoring its abort is abandoned after abortGraceMs; its lease is left to expire', async () => {
  const item = await claimed();
  let started = false;
  const h = start(
    item,
    {
      t: {
        handle: () => {
          started = true;
          return new Promise(() => undefined);
        },
      },
    },
    { abortGraceMs: 50 },
  );
  await waitFor(() => started, 5_000, 'the handler to start');
  h.run.abort('cancelled');
  expect(await h.done).toBe('abandoned');
  expect(h.settled).toEqual([h.run]);
  expect(await mustGet(tl.ledger, item.id)).toMatchObject({ state: 'processing', leaseToken: item.leaseToken });
});

test('the outcome: a value returned completes through the batch completer; an emptied lane says so', async () => {
  const item = await claimed({}, 't', 'lane-1');
  const h = start(item, { t: { handle: async () => ({ ok: true }) } });
  expect(await h.done).toBe('completed');
  expect(h.completions).toEqual([1]);
  expect(h.run.laneAdvanced).toBe(false);
  expect(await mustGet(tl.ledger, item.id)).toMatchObject({ state: 'completed', result: { ok: true } });
});

test('the outcome: a completion that loses its CAS is leaseLost, and nothing is written', async () => {
  const item = await claimed();
  const h = start(withForeignToken(item), { t: { handle: async () => 'done' } });
  expect(await h.done).toBe('leaseLost');
  expect(await mustGet(tl.ledger, item.id)).toMatchObject({
    state: 'processing',
    leaseToken: item.leaseToken,
    result: null,
  });
});

test(
  'the outcome: a lease lost while the handler runs aborts it ' +
    'with reason lease_lost and ends leaseLost, writing nothing',
  async () => {
    const item = await claimed();
    const thief = 'stolen-token-0000000000';
    let reason: unknown;
    const h = start(item, {
      t: {
        handle: async (_job, ctx) => {
          await sql`UPDATE ${tl.ledger.tables.items} SET lease_token = ${thief} WHERE id = ${item.id}`.execute(
            tl.ledger.db,
          );
          expect(await ctx.heartbeat()).toBe(false);
          reason = ctx.signal.reason;
          ctx.signal.throwIfAborted();
        },
      },
    });
    expect(await h.done).toBe('leaseLost');
    expect((reason as JobAbortedError).reason).toBe('lease_lost');
    expect((reason as JobAbortedError).message).toBe('aborted: lease lost');
    expect(await mustGet(tl.ledger, item.id)).toMatchObject({ state: 'processing', leaseToken: thief });
    expect(await history(tl.ledger, item.id)).toEqual([]);
  },
);

test('a lease keeper retries a renewal the ledger failed, through the narrow lease port', async () => {
  const item = await claimed();
  let calls = 0;
  const ledger: LeaseLedger = {
    renew: (handle, leaseMs) => {
      calls++;
      return calls === 1 ? Promise.reject(new Error('ledger briefly unreachable')) : tl.ledger.renew(handle, leaseMs);
    },
  };
  const events: string[] = [];
  const keeper = new LeaseKeeper(ledger, item, 60_000, (e) => events.push(e));
  expect(await keeper.renewNow()).toBe(true);
  expect(calls).toBe(2);
  expect(events).toEqual([]);
});
