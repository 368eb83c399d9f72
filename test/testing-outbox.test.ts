// lanewake/testing's run(): what a committed ctx.transaction put in the outbox (ctx.enqueue).
import { expect, test } from 'vitest';
import { createTestRunner } from 'lanewake/testing';
import type { JobContext } from '../src/index.js';
import { testScope } from './support/scope.js';

const scope = testScope();

test('run() answers what ctx.enqueue put in the committed transaction; outside one it throws', async () => {
  const { ledger } = await scope.ledger();
  const t = createTestRunner();
  const handler = async (job: { payload: { n: number } }, ctx: JobContext) =>
    ctx.transaction(async () => {
      await ctx.enqueue({ queue: 'mail', type: 'receipt', payload: { n: job.payload.n } });
      return 'ok';
    });
  const r = await t.run(handler, { payload: { n: 7 } }, { db: ledger.db });
  expect(r).toMatchObject({
    outcome: 'completed',
    result: 'ok',
    enqueued: [{ queue: 'mail', type: 'receipt', payload: { n: 7 } }],
  });

  const rolledBack = await t.run(
    async (_job: { payload: unknown }, ctx: JobContext) =>
      ctx.transaction(async () => {
        await ctx.enqueue({ queue: 'mail', type: 'receipt', payload: {} });
        throw new Error('rolled back');
      }),
    { payload: {} },
    { db: ledger.db },
  );
  expect(rolledBack).toMatchObject({ outcome: 'retry', enqueued: [] });

  const outside = await t.run(
    async (_job: { payload: unknown }, ctx: JobContext) => ctx.enqueue({ queue: 'mail', type: 'receipt', payload: {} }),
    { payload: {} },
  );
  expect(outside.outcome).toBe('retry');
  expect(String((outside as { error: unknown }).error)).toMatch(/only inside ctx.transaction/);
});
