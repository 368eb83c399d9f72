import type { Kysely } from 'kysely';
import { describe, expectTypeOf, test } from 'vitest';
import { z } from 'zod';
import {
  Consumer,
  defineJobs,
  type EnqueueResult,
  type HandlerEntry,
  type Job,
  type Ledger,
  type Producer,
} from '../src/index.js';
import { createTestRunner } from 'lanewake/testing';

// Compile-time checks of the typed registry (vitest --typecheck runs this file inside `npm test`).
// Every `@ts-expect-error` line must fail to compile: one that compiles fails the run.

const jobs = defineJobs({
  billing: {
    'invoice.send': z.object({ orderId: z.string(), copies: z.number().int().default(1) }),
    'invoice.void': z.object({ orderId: z.string(), reason: z.string() }),
  },
  mail: { welcome: z.object({ to: z.email(), at: z.iso.datetime().transform((s) => new Date(s)) }) },
});

declare const producer: Producer;
declare const ledger: Ledger;
declare const db: Kysely<{ invoices: { order_id: string } }>;
const typed = jobs.producer(producer);

describe('enqueue', () => {
  test('a known queue, type and payload compile; the result is an EnqueueResult', () => {
    expectTypeOf(
      typed.enqueue('billing', 'invoice.send', { orderId: 'A1' }, { lane: 'customer:42' }),
    ).resolves.toEqualTypeOf<EnqueueResult>();
    // The payload is the schema's input: `copies` has a default, so it may be left out; `at` is the
    // string before its transform.
    void typed.enqueue('mail', 'welcome', { to: 'a@b.c', at: '2026-01-01T00:00:00Z' });
  });

  test('a misspelled queue or type, or a wrong payload, does not compile', () => {
    // @ts-expect-error misspelled queue
    void typed.enqueue('biling', 'invoice.send', { orderId: 'A1' });
    // @ts-expect-error misspelled type
    void typed.enqueue('billing', 'invoice.sent', { orderId: 'A1' });
    // @ts-expect-error a type of another queue
    void typed.enqueue('billing', 'welcome', { to: 'a@b.c', at: 'x' });
    // @ts-expect-error wrong field type
    void typed.enqueue('billing', 'invoice.send', { orderId: 1 });
    // @ts-expect-error missing field
    void typed.enqueue('billing', 'invoice.void', { orderId: 'A1' });
    // @ts-expect-error unknown field
    void typed.enqueue('billing', 'invoice.send', { orderId: 'A1', orderID: 'A1' });
    // @ts-expect-error the output type (a Date) is not what a producer passes
    void typed.enqueue('mail', 'welcome', { to: 'a@b.c', at: new Date() });
    // @ts-expect-error an option the ledger does not know
    void typed.enqueue('billing', 'invoice.send', { orderId: 'A1' }, { lanes: 'x' });
  });

  test('enqueueMany: each item is checked against its own type', () => {
    void typed.enqueueMany([
      { queue: 'billing', type: 'invoice.send', payload: { orderId: 'A1' }, lane: 'c:1' },
      { queue: 'billing', type: 'invoice.void', payload: { orderId: 'A1', reason: 'dup' } },
    ]);
    // @ts-expect-error invoice.void's payload needs a reason
    void typed.enqueueMany([{ queue: 'billing', type: 'invoice.void', payload: { orderId: 'A1' } }]);
    // @ts-expect-error misspelled type
    void typed.enqueueMany([{ queue: 'billing', type: 'invoice.sned', payload: { orderId: 'A1' } }]);
  });

  test("enqueue in the caller's transaction and enqueueWithin are typed too", async () => {
    await typed.transaction(db, async (tx) => {
      expectTypeOf(tx.trx.selectFrom('invoices').select('order_id').execute()).resolves.toEqualTypeOf<
        { order_id: string }[]
      >();
      await tx.enqueue('billing', 'invoice.send', { orderId: 'A1' });
      // @ts-expect-error wrong payload inside the transaction
      await tx.enqueue('billing', 'invoice.send', { order: 'A1' });
      // @ts-expect-error wrong payload in enqueueMany inside the transaction
      await tx.enqueueMany([{ queue: 'mail', type: 'welcome', payload: { to: 'a@b.c' } }]);
    });
    await db.transaction().execute(async (trx) => {
      const after = await typed.enqueueWithin(trx, [
        { queue: 'billing', type: 'invoice.send', payload: { orderId: 'A1' } },
      ]);
      // @ts-expect-error misspelled queue
      await typed.enqueueWithin(trx, [{ queue: 'mails', type: 'welcome', payload: { to: 'a@b.c', at: '' } }]);
      return after;
    });
    // jobs.input: a checked EnqueueInput for the ledger's own calls.
    await ledger.enqueue(await jobs.input('billing', 'invoice.void', { orderId: 'A1', reason: 'r' }));
    // @ts-expect-error wrong payload
    await jobs.input('billing', 'invoice.void', { orderId: 'A1' });
  });
});

describe('handlers', () => {
  test("a handler's job.payload is the schema's output", () => {
    const billing = jobs.handlers('billing', {
      'invoice.send': async (job) => {
        expectTypeOf(job).toEqualTypeOf<Job<{ orderId: string; copies: number }>>();
        return { sent: job.payload.copies };
      },
      'invoice.void': {
        deadlineMs: 5_000,
        handle: async (job) => expectTypeOf(job.payload.reason).toEqualTypeOf<string>(),
      },
    });
    const mail = jobs.handlers('mail', { welcome: async (job) => expectTypeOf(job.payload.at).toEqualTypeOf<Date>() });
    // What Consumer and the worker's handlers module take.
    void new Consumer({ ledger, queue: 'billing', handlers: billing });
    const module: Record<string, Record<string, HandlerEntry>> = { billing, mail }; // a worker's handlers module
    void module;
  });

  test('a type the queue does not have, or a wrong payload use, does not compile', () => {
    // @ts-expect-error misspelled type
    jobs.handlers('billing', { 'invoice.sent': async () => undefined });
    // @ts-expect-error misspelled queue
    jobs.handlers('biling', {});
    jobs.handlers('billing', {
      // @ts-expect-error no such field on the payload
      'invoice.send': async (job) => job.payload.orderID,
    });
    jobs.withDatabase<{ invoices: { order_id: string } }>().handlers('billing', {
      'invoice.send': async (job, ctx) =>
        ctx.transaction(async (trx) => {
          await trx.insertInto('invoices').values({ order_id: job.payload.orderId }).execute();
          // @ts-expect-error not a table of the handler's database
          await trx.insertInto('invoice').values({ order_id: job.payload.orderId }).execute();
        }),
    });
  });
});

describe('lanewake/testing', () => {
  test("run() types the test job's payload from a typed handler", async () => {
    const runner = createTestRunner({ ledger });
    const billing = jobs.handlers('billing', { 'invoice.send': async (job) => job.payload.orderId });
    await runner.run(billing['invoice.send'], { payload: { orderId: 'A1' } });
    // @ts-expect-error wrong payload for the handler's type
    await runner.run(billing['invoice.send'], { payload: { order: 'A1' } });
  });
});
