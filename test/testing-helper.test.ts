import { Kysely, MysqlDialect, sql } from 'kysely';
import { createPool } from 'mysql2';
import { afterEach, expect, test } from 'vitest';
import { z } from 'zod';
import { createTestRunner } from 'lanewake/testing';
import {
  Defer,
  PermanentError,
  Producer,
  ValidationError,
  defineHandler,
  defineJobs,
  type JobContext,
  type StandardSchemaV1,
} from '../src/index.js';
import { mysqlPoolOptions } from '../src/ledger/connection.js';
import { freshQueue, itemCount } from './support/items.js';
import type { TestLedger } from './support/ledger.js';
import { testScope } from './support/scope.js';

// lanewake/testing (docs/testing.md) and the typed job registry, against the real MariaDB.

interface AppDb {
  invoices: { order_id: string; copies: number };
}

const scope = testScope();
let app: Kysely<AppDb> | undefined;
afterEach(async () => {
  await app?.destroy();
  app = undefined;
});

/** A ledger of the test's own with an `invoices` table beside it, and the app's own Kysely pool on that database. */
async function setup(): Promise<{ tl: TestLedger; app: Kysely<AppDb> }> {
  const tl = await scope.ledger();
  await sql`CREATE TABLE invoices (order_id VARCHAR(64) PRIMARY KEY, copies INT NOT NULL) ENGINE=InnoDB`.execute(
    tl.ledger.db,
  );
  app = new Kysely<AppDb>({
    dialect: new MysqlDialect({ pool: createPool(mysqlPoolOptions({ url: tl.url, poolSize: 4 })) }),
  });
  return { tl, app };
}

const invoices = async (db: Kysely<AppDb>): Promise<string[]> =>
  (await db.selectFrom('invoices').select('order_id').orderBy('order_id').execute()).map((r) => r.order_id);

/** A handler that writes an invoice through ctx.transaction. */
const sendInvoice = async (job: { payload: { orderId: string } }, ctx: JobContext<AppDb>): Promise<{ sent: string }> =>
  ctx.transaction(async (trx) => {
    await trx.insertInto('invoices').values({ order_id: job.payload.orderId, copies: 1 }).execute();
    return { sent: job.payload.orderId };
  });

class Rollback extends Error {}

test(
  "run(): ctx.transaction joins the caller's transaction: its writes " +
    'are seen inside it and kept or rolled back as the caller decides',
  async () => {
    const { app } = await setup();
    const runner = createTestRunner();
    await expect(
      app.transaction().execute(async (trx) => {
        const r = await runner.run(sendInvoice, { payload: { orderId: 'A1' } }, { db: trx });
        expect(r).toMatchObject({ outcome: 'completed', result: { sent: 'A1' } });
        expect(await invoices(trx)).toEqual(['A1']); // visible inside the caller's transaction
        throw new Rollback();
      }),
    ).rejects.toBeInstanceOf(Rollback);
    expect(await invoices(app)).toEqual([]); // rolled back with it

    await app.transaction().execute((trx) => runner.run(sendInvoice, { payload: { orderId: 'A2' } }, { db: trx }));
    expect(await invoices(app)).toEqual(['A2']); // committed with it

    // A Kysely instance: each ctx.transaction commits on its own.
    expect(await runner.run(sendInvoice, { payload: { orderId: 'A3' } }, { db: app })).toMatchObject({
      outcome: 'completed',
    });
    expect(await invoices(app)).toEqual(['A2', 'A3']);
    // A failed write inside ctx.transaction: the handler threw, so a retry.
    const dup = await runner.run(sendInvoice, { payload: { orderId: 'A3' } }, { db: app });
    expect(dup.outcome).toBe('retry');
  },
);

test('run(): outcomes as the engine writes them, and ctx in memory (steps, progress, checkpoint, signal)', async () => {
  const runner = createTestRunner();
  const failing = async (): Promise<never> => {
    throw new Error('smtp down');
  };
  expect(await runner.run(failing, { payload: {} })).toMatchObject({
    outcome: 'retry',
    error: new Error('smtp down'),
  });
  expect(await runner.run(failing, { payload: {}, attempt: 25 })).toMatchObject({
    outcome: 'failed',
    failureClass: 'error',
  });
  const permanent = async (): Promise<never> => {
    throw new PermanentError('no such order', 'not_found');
  };
  expect(await runner.run(permanent, { payload: {} })).toMatchObject({
    outcome: 'failed',
    failureClass: 'not_found',
  });

  let calls = 0;
  const stepper = async (job: { payload: { n: number } }, ctx: JobContext): Promise<number> => {
    const doubled = await ctx.step('double', async () => {
      calls += 1;
      return job.payload.n * 2;
    });
    ctx.progress(50);
    await ctx.checkpoint({ at: 'half' });
    ctx.progress({ done: doubled });
    return doubled;
  };
  const first = await runner.run(stepper, { payload: { n: 21 } });
  expect(first).toMatchObject({
    outcome: 'completed',
    result: 42,
    progress: [50, { done: 42 }],
    checkpoint: { at: 'half' },
    steps: { double: 42 },
  });
  // A later attempt with the step recorded: the step's fn does not run again.
  expect(await runner.run(stepper, { payload: { n: 1 } }, { steps: first.steps })).toMatchObject({ result: 42 });
  expect(calls).toBe(1);

  const cancel = new AbortController();
  const waiting = runner.run(
    async (_job: { payload: unknown }, ctx: JobContext) =>
      new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error))),
    { payload: null },
    { signal: cancel.signal },
  );
  cancel.abort();
  expect(await waiting).toMatchObject({ outcome: 'aborted', reason: 'cancelled' });
});

test(
  'drain(): runs the queue through the ledger without Redis until ' +
    'idle, and answers each item (completed, dead, retried)',
  async () => {
    const { tl, app } = await setup();
    const queue = freshQueue('drain');
    const producer = new Producer({ ledger: tl.ledger });
    const ok = await producer.enqueue({ queue, type: 'invoice.send', payload: { orderId: 'D1' } });
    const bad = await producer.enqueue({ queue, type: 'invoice.send', payload: { orderId: 'test-1' } });
    const flaky = await producer.enqueue({ queue, type: 'flaky', payload: {} });
    let flakyRuns = 0;
    const handlers = {
      'invoice.send': async (job: { payload: { orderId: string } }, ctx: JobContext<AppDb>) => {
        if (job.payload.orderId.startsWith('test-')) throw new PermanentError('test orders are never invoiced');
        return sendInvoice(job, ctx);
      },
      flaky: async () => {
        flakyRuns += 1;
        if (flakyRuns === 1) throw new Error('first attempt fails');
        return 'second time lucky';
      },
    };
    const runner = createTestRunner({ ledger: tl.ledger });
    // The retry waits out its backoff (1 s by default), past the drain: it stays pending, with its error.
    const drained = await runner.drain<AppDb>({ queue, handlers });
    expect(drained).toHaveLength(3);
    const byId = new Map(drained.map((d) => [d.id, d]));
    expect(byId.get(ok.id)).toMatchObject({
      type: 'invoice.send',
      state: 'completed',
      result: { sent: 'D1' },
      error: null,
      attempts: 1,
      runs: ['completed'],
    });
    expect(byId.get(bad.id)).toMatchObject({ state: 'dead', failureClass: 'permanent', attempts: 1, runs: ['dead'] });
    expect(byId.get(bad.id)?.error).toContain('test orders are never invoiced');
    expect(byId.get(flaky.id)).toMatchObject({ type: 'flaky', state: 'pending', attempts: 1, runs: ['retried'] });
    expect(byId.get(flaky.id)?.error).toContain('first attempt fails');
    expect(await invoices(app)).toEqual(['D1']);

    // `scheduled`: wait for items not due yet too (here the retry, after a short backoff).
    const again = await runner.drain({
      queue,
      handlers,
      scheduled: true,
      consumer: { backoff: { baseMs: 10, jitter: 0 } },
    });
    expect(again).toEqual([
      expect.objectContaining({
        id: flaky.id,
        state: 'completed',
        result: 'second time lucky',
        attempts: 2,
        runs: ['completed'],
      }),
    ]);
  },
);

test(
  'typed registry: a refused payload is a ValidationError naming the ' +
    'field, and nothing is written (single, many, in a transaction)',
  async () => {
    const { tl, app } = await setup();
    const queue = freshQueue('typed');
    const jobs = defineJobs({
      [queue]: { 'invoice.send': z.object({ orderId: z.string(), copies: z.number().int().default(1) }) },
    });
    const typed = jobs.producer(new Producer({ ledger: tl.ledger }));

    const single = await typed.enqueue(queue, 'invoice.send', { orderId: 1 } as never).catch((e: unknown) => e);
    expect(single).toBeInstanceOf(ValidationError);
    expect((single as ValidationError).fields).toEqual(['payload.orderId']);

    const many = await typed
      .enqueueMany([
        { queue, type: 'invoice.send', payload: { orderId: 'M1' } },
        { queue, type: 'invoice.send', payload: { orderId: 'M2', copies: 1.5 } },
      ])
      .catch((e: unknown) => e);
    expect((many as ValidationError).fields).toEqual(['items[1].payload.copies']);

    const unknownType = await typed
      .enqueue(queue, 'invoice.sent' as never, { orderId: 'X' } as never)
      .catch((e: unknown) => e);
    expect((unknownType as ValidationError).fields).toEqual(['type']);

    const inTx = await typed
      .transaction(app, async (tx) => {
        await tx.trx.insertInto('invoices').values({ order_id: 'T1', copies: 1 }).execute();
        await tx.enqueue(queue, 'invoice.send', { orderId: 'T1' });
        await tx.enqueue(queue, 'invoice.send', {} as never);
      })
      .catch((e: unknown) => e);
    expect((inTx as ValidationError).fields).toEqual(['payload.orderId']);

    expect(await itemCount(tl.ledger, queue)).toBe(0); // nothing of any of them was written
    expect(await invoices(app)).toEqual([]); // and the caller's transaction rolled back

    await typed.transaction(app, (tx) => tx.enqueue(queue, 'invoice.send', { orderId: 'T2' }));
    expect(await itemCount(tl.ledger, queue)).toBe(1);
  },
);

test(
  "typed handlers get the schema's parsed output; a payload written past " +
    'the registry ends dead, invalid_payload, without running the handler',
  async () => {
    const { tl, app } = await setup();
    const queue = freshQueue('typed-run');
    const jobs = defineJobs({
      [queue]: { 'invoice.send': z.object({ orderId: z.string(), copies: z.number().int().default(2) }) },
    });
    const seen: unknown[] = [];
    const handlers = jobs.withDatabase<AppDb>().handlers(queue, {
      'invoice.send': async (job, ctx) => {
        seen.push(job.payload);
        return ctx.transaction(async (trx) => {
          await trx
            .insertInto('invoices')
            .values({ order_id: job.payload.orderId, copies: job.payload.copies })
            .execute();
          return job.payload.copies;
        });
      },
    });
    const typed = jobs.producer(new Producer({ ledger: tl.ledger }));
    const good = await typed.enqueue(queue, 'invoice.send', { orderId: 'P1' }); // copies left to the schema's default
    // By hand, past the registry.
    const forged = await tl.ledger.enqueue({ queue, type: 'invoice.send', payload: { order: 'P2' } });

    const runner = createTestRunner({ ledger: tl.ledger });
    const drained = await runner.drain({ queue, handlers });
    const byId = new Map(drained.map((d) => [d.id, d]));
    expect(byId.get(good.id)).toMatchObject({ state: 'completed', result: 2, runs: ['completed'] });
    expect(byId.get(forged.id)).toMatchObject({
      state: 'dead',
      failureClass: 'invalid_payload',
      attempts: 1,
      runs: ['dead'],
    });
    expect(byId.get(forged.id)?.error).toContain('orderId');
    expect(seen).toEqual([{ orderId: 'P1', copies: 2 }]);
    expect(await app.selectFrom('invoices').selectAll().execute()).toEqual([{ order_id: 'P1', copies: 2 }]);

    // Inline: the same parse, and the same refusal.
    const handler = handlers['invoice.send'];
    const inline = await runner.run(handler, { payload: { orderId: 'P3' } }, { db: app });
    expect(inline).toMatchObject({ outcome: 'completed', result: 2, job: { payload: { orderId: 'P3', copies: 2 } } });
    const refused = await runner.run(handler, { payload: { orderId: 3 } as never }, { db: app });
    expect(refused).toMatchObject({ outcome: 'failed', failureClass: 'invalid_payload' });
    expect((refused as { error: ValidationError }).error.fields).toEqual(['payload.orderId']);
  },
);

test(
  "a coalesced group's payloads are each parsed by the schema; one it " +
    'refuses ends the group invalid_payload, naming payloads[k]',
  async () => {
    const { tl } = await setup();
    const queue = freshQueue('coalesce-schema');
    const producer = new Producer({ ledger: tl.ledger });
    const good = await producer.enqueueMany([1, 2].map((n) => ({ queue, type: 'sync', lane: 'good', payload: { n } })));
    const bad = await producer.enqueueMany(
      [3, 'x', 4].map((n) => ({ queue, type: 'sync', lane: 'bad', payload: { n } })),
    );
    const seen: unknown[] = [];
    const handlers = {
      sync: defineHandler({
        coalesce: 'all',
        schema: z.object({ n: z.number().transform((n) => n * 10) }),
        handle: async (job) => {
          seen.push({ payload: job.payload, payloads: job.coalesced?.payloads });
          return 'synced';
        },
      }),
    };
    const drained = await createTestRunner({ ledger: tl.ledger }).drain({ queue, handlers });
    const head = (id: string | undefined) => drained.find((d) => d.id === id);
    expect(head(good[0]?.id)).toMatchObject({ state: 'completed', result: 'synced' });
    expect(seen).toEqual([{ payload: { n: 20 }, payloads: [{ n: 10 }, { n: 20 }] }]);
    expect(head(bad[0]?.id)).toMatchObject({ state: 'dead', failureClass: 'invalid_payload' });
    expect(head(bad[0]?.id)?.error).toContain('payloads[1].n:');
  },
);

test('any Standard Schema validator, an async one too: checked at enqueue and again before the handler', async () => {
  const { tl } = await setup();
  const queue = freshQueue('standard');
  // A validator of no library: `~standard.validate` answering with a promise.
  const orderIdSchema: StandardSchemaV1<{ orderId: string }, { orderId: string; upper: string }> = {
    '~standard': {
      version: 1,
      vendor: 'test',
      validate: async (value) => {
        const orderId = (value as { orderId?: unknown } | null)?.orderId;
        return typeof orderId === 'string'
          ? { value: { orderId, upper: orderId.toUpperCase() } }
          : { issues: [{ message: 'must be a string', path: [{ key: 'orderId' }] }] };
      },
    },
  };
  const jobs = defineJobs({ [queue]: { 'invoice.send': orderIdSchema } });
  const typed = jobs.producer(new Producer({ ledger: tl.ledger }));
  const refused = await typed.enqueue(queue, 'invoice.send', { orderId: 7 } as never).catch((e: unknown) => e);
  expect((refused as ValidationError).fields).toEqual(['payload.orderId']);
  expect(await itemCount(tl.ledger, queue)).toBe(0);

  const good = await typed.enqueue(queue, 'invoice.send', { orderId: 'a1' });
  const forged = await tl.ledger.enqueue({ queue, type: 'invoice.send', payload: { orderId: 7 } });
  const handlers = jobs.handlers(queue, { 'invoice.send': async (job) => job.payload.upper });
  const drained = await createTestRunner({ ledger: tl.ledger }).drain({ queue, handlers });
  expect(drained.find((d) => d.id === good.id)).toMatchObject({ state: 'completed', result: 'A1' });
  expect(drained.find((d) => d.id === forged.id)).toMatchObject({ state: 'dead', failureClass: 'invalid_payload' });
  expect(drained.find((d) => d.id === forged.id)?.error).toContain('orderId: must be a string');
});

test(
  'run() answers a skip with its reason and a Defer() with no time; ' +
    'it times stages and gives a coalescing type a group of one',
  async () => {
    const runner = createTestRunner();
    const skip = await runner.run(async (_job: { payload: unknown }, ctx: JobContext) => ctx.skip('source inactive'), {
      payload: {},
    });
    expect(skip).toMatchObject({ outcome: 'skipped', reason: 'source inactive' });
    const deferred = await runner.run(
      async () => {
        throw new Defer();
      },
      { payload: {} },
    );
    expect(deferred).toMatchObject({ outcome: 'released', runAt: undefined });
    const staged = await runner.run(
      defineHandler<{ n: number }>({
        coalesce: 'all',
        handle: async (job, ctx) => ctx.stage('sum', () => job.coalesced.payloads.reduce((a, p) => a + p.n, 0)),
      }),
      { id: 'one', payload: { n: 4 } },
    );
    expect(staged).toMatchObject({
      outcome: 'completed',
      result: 4,
      job: { coalesced: { ids: ['one'], count: 1, payloads: [{ n: 4 }] } },
    });
    expect(staged.stages.map((s) => s.name)).toEqual(['sum']);
  },
);
