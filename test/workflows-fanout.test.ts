import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import type { Job, JobContext } from '../src/consumer/types.js';
import type { WorkflowJobInput } from '../src/ledger/workflow-types.js';
import { consumerHarness } from './support/consumer-harness.js';
import { createEffectsTable, effectCount, insertEffect, nowUs, type EffectsDB } from './support/effects.js';
import { mustGet } from './support/items.js';
import { serverVersion, waitFor } from './support/ledger.js';

// Fan-out from a handler (ctx.workflow inside ctx.transaction) and its fan-in (ctx.dependencies, paged).

const harness = consumerHarness('fanout');
/**
 * 1,000 on MariaDB; fewer on TiDB, where on a loaded 2-core machine every child's end queues longer on the
 * fan-in's counter row (docs/design/workflows.md, Cost) and 1,000 took minutes.
 */
const CHILDREN = /tidb/i.test(await serverVersion()) ? 250 : 1000;

type Ctx = JobContext<EffectsDB>;
/** A handler of the effects table's database, as a consumer's handler table takes it. */
const handler = (fn: (job: Job<unknown>, ctx: Ctx) => Promise<unknown>): never => fn as never;

describe('workflows: fan-out from a handler', () => {
  test(`a handler adds children and a job after them: each runs once, the fan-in sees all`, async () => {
    const setup = await harness.setUp();
    const { tl, producer, queue } = setup;
    await createEffectsTable(tl.ledger);
    const { id: parent } = await producer.enqueue({ queue, type: 'split', payload: {} });
    let fanIn: { pages: number; completed: number; names: Set<string> } | undefined;
    let splits = 0;
    await harness.consumer(
      {
        split: handler(async (job, ctx) =>
          ctx.transaction(async (trx) => {
            splits++;
            const jobs: Record<string, WorkflowJobInput> = {};
            for (let i = 0; i < CHILDREN; i++) jobs[`c${i}`] = { type: 'child', payload: { n: i } };
            jobs.sum = { type: 'sum', payload: {}, after: Object.keys(jobs) };
            await insertEffect(trx, job as Job<{ n: number }>, 'w', nowUs());
            const wf = await ctx.workflow({ queue, name: 'fan', key: `fan:${job.id}`, jobs });
            return { workflow: wf.id };
          }),
        ),
        child: handler(async (job, ctx) =>
          ctx.transaction((trx) => insertEffect(trx, job as Job<{ n: number }>, 'w', nowUs())),
        ),
        sum: handler(async (job, ctx) => {
          const seen = { pages: 0, completed: 0, names: new Set<string>() };
          for (let after: string | null = null; ; ) {
            const page = await ctx.dependencies({ after, limit: 300 });
            seen.pages++;
            for (const d of page.dependencies) {
              seen.names.add(d.name);
              if (d.state === 'completed') seen.completed++;
            }
            if (page.next === null) break;
            after = page.next;
          }
          fanIn = seen;
          await ctx.transaction((trx) => insertEffect(trx, job as Job<{ n: number }>, 'w', nowUs()));
        }),
      },
      { concurrency: 8 },
    );
    const done = await waitFor(
      async () => {
        const p = await mustGet(tl.ledger, parent);
        if (p.state !== 'completed') return undefined;
        const wf = await tl.ledger.workflows.get((p.result as { workflow: string }).workflow);
        return wf?.jobs.find((j) => j.name === 'sum')?.state === 'completed' ? wf : undefined;
      },
      540_000,
      'the fan-in completed',
    );
    expect(splits).toBe(1);
    expect(done.parentItem).toBe(parent);
    expect(done.jobs.filter((j) => j.state === 'completed')).toHaveLength(CHILDREN + 1);
    // One effect per child, one for the fan-in, one for the parent: none twice (primary key), none missing.
    expect(await effectCount(tl.ledger)).toBe(CHILDREN + 2);
    expect(fanIn?.completed).toBe(CHILDREN);
    expect(fanIn?.names.size).toBe(CHILDREN);
    expect(fanIn?.pages).toBe(Math.ceil(CHILDREN / 300));
    const counters = await sql<{ n: number | string }>`SELECT deps_pending AS n FROM ${tl.ledger.tables.workflowJobs}
      WHERE workflow_id = ${done.id} AND name = 'sum'`.execute(tl.ledger.db);
    expect(Number(counters.rows[0]?.n)).toBe(0);
  }, 600_000);

  test('ctx.workflow outside ctx.transaction throws and writes nothing', async () => {
    const setup = await harness.setUp();
    const { tl, producer, queue } = setup;
    const { id } = await producer.enqueue({ queue, type: 'split', payload: {}, maxAttempts: 1 });
    await harness.consumer({
      split: handler(async (_job, ctx) => ctx.workflow({ queue, jobs: { a: { type: 'x', payload: {} } } })),
    });
    const dead = await waitFor(
      async () => {
        const item = await mustGet(tl.ledger, id);
        return item.state === 'dead' ? item : undefined;
      },
      150_000,
      'parent dead',
    );
    expect(dead.lastError).toMatch(/ctx.workflow runs only inside ctx.transaction/);
    const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${tl.ledger.tables.workflows}`.execute(
      tl.ledger.db,
    );
    expect(Number(r.rows[0]?.n)).toBe(0);
  }, 180_000);
});
