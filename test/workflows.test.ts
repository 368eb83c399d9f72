import { describe, expect, test } from 'vitest';
import type { Job, JobContext } from '../src/consumer/types.js';
import type { WorkflowInput } from '../src/ledger/workflow-types.js';
import { consumerHarness } from './support/consumer-harness.js';
import { createEffectsTable, insertEffect, nowUs, readEffects, type EffectsDB } from './support/effects.js';
import { mustGet } from './support/items.js';
import { waitFor } from './support/ledger.js';

// Workflows (docs/design/workflows.md) run by a consumer: dependency order, the failure policies, fan-out from a
// handler with its fan-in, idempotency, and bad input that writes nothing.

const harness = consumerHarness('workflow');

type Ctx = JobContext<EffectsDB>;
/** A handler of the effects table's database, as a consumer's handler table takes it. */
const handler = (fn: (job: Job<unknown>, ctx: Ctx) => Promise<unknown>): never => fn as never;

/** A handler that records its run once (the effects table's primary key) and returns its dependencies' names. */
function recorder(worker = 'w'): never {
  return handler(async (job, ctx) => {
    const startedAtUs = nowUs();
    const deps = await ctx.dependencies();
    return ctx.transaction(async (trx) => {
      await insertEffect(trx, job as Job<{ n: number }>, worker, startedAtUs);
      return { after: deps.dependencies.map((d) => `${d.name}:${d.state}`).sort() };
    });
  });
}

async function settled(setup: Awaited<ReturnType<typeof harness.setUp>>, ids: readonly string[], what: string) {
  return waitFor(
    async () => {
      const items = await Promise.all(ids.map((id) => mustGet(setup.tl.ledger, id)));
      return items.every((i) => ['completed', 'skipped', 'dead', 'cancelled'].includes(i.state)) ? items : undefined;
    },
    150_000,
    what,
  );
}

describe('workflows', () => {
  test('a DAG of 6 runs each job once, in dependency order, and the fan-in sees its parents', async () => {
    const setup = await harness.setUp();
    await createEffectsTable(setup.tl.ledger);
    const { producer, queue } = setup;
    const def: WorkflowInput = {
      queue,
      name: 'six',
      jobs: {
        a: { type: 'step', payload: {} },
        b: { type: 'step', payload: {}, after: ['a'] },
        c: { type: 'step', payload: {}, after: ['b'] },
        d: { type: 'step', payload: {}, after: ['b'] },
        e: { type: 'step', payload: {}, after: ['a'] },
        report: { type: 'step', payload: {}, after: ['c', 'd', 'e'] },
      },
    };
    const wf = await producer.workflow(def);
    expect(wf.duplicate).toBe(false);
    // Only the root is claimable before anything runs.
    const before = await setup.tl.ledger.workflows.get(wf.id);
    expect(before?.jobs.filter((j) => j.state === 'pending').map((j) => j.name)).toEqual(['a']);
    await harness.consumer({ step: recorder() }, { concurrency: 4 });
    const items = await settled(setup, Object.values(wf.jobs), 'six jobs ended');
    expect(items.map((i) => i.state)).toEqual(items.map(() => 'completed'));
    const effects = new Map((await readEffects(setup.tl.ledger)).map((e) => [e.itemId, e]));
    expect(effects.size).toBe(6);
    for (const [name, job] of Object.entries(def.jobs)) {
      const mine = effects.get(wf.jobs[name]!)!;
      for (const parent of job.after ?? [])
        expect(mine.startedAtUs).toBeGreaterThan(effects.get(wf.jobs[parent]!)!.endedAtUs);
    }
    const report = await mustGet(setup.tl.ledger, wf.jobs.report!);
    expect(report.result).toEqual({ after: ['c:completed', 'd:completed', 'e:completed'] });
    expect(report.workflowId).toBe(wf.id);
  }, 180_000);

  test("policy 'cancel': a dead job's dependents are cancelled, cascading, and never run", async () => {
    const setup = await harness.setUp();
    await createEffectsTable(setup.tl.ledger);
    const { producer, queue } = setup;
    const wf = await producer.workflow({
      queue,
      jobs: {
        a: { type: 'boom', payload: {}, maxAttempts: 1 },
        side: { type: 'step', payload: {} },
        b: { type: 'step', payload: {}, after: ['a'] },
        c: { type: 'step', payload: {}, after: ['b', 'side'] },
      },
    });
    await harness.consumer({
      step: recorder(),
      boom: async () => {
        throw new Error('boom');
      },
    });
    const items = await settled(setup, Object.values(wf.jobs), 'jobs ended');
    expect(Object.fromEntries(items.map((i, k) => [Object.keys(wf.jobs)[k], i.state]))).toEqual({
      a: 'dead',
      side: 'completed',
      b: 'cancelled',
      c: 'cancelled',
    });
    expect((await mustGet(setup.tl.ledger, wf.jobs.c!)).failureClass).toBe('dependency_failed');
    expect((await readEffects(setup.tl.ledger)).map((e) => e.itemId)).toEqual([wf.jobs.side]);
  }, 180_000);

  test("policy 'run': the dependent runs anyway and sees the failure", async () => {
    const setup = await harness.setUp();
    await createEffectsTable(setup.tl.ledger);
    const { producer, queue } = setup;
    const wf = await producer.workflow({
      queue,
      onFailure: 'run',
      jobs: {
        a: { type: 'boom', payload: {}, maxAttempts: 1 },
        ok: { type: 'step', payload: {} },
        after: { type: 'step', payload: {}, after: ['a', 'ok'] },
      },
    });
    await harness.consumer({
      step: recorder(),
      boom: async () => {
        throw new Error('boom');
      },
    });
    await settled(setup, Object.values(wf.jobs), 'jobs ended');
    const after = await mustGet(setup.tl.ledger, wf.jobs.after!);
    expect(after.state).toBe('completed');
    expect(after.result).toEqual({ after: ['a:dead', 'ok:completed'] });
  }, 180_000);
});
