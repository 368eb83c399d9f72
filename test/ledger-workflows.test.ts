import { sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { ValidationError, WorkflowConflictError } from '../src/errors.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { migrate, SCHEMA_VERSION } from '../src/ledger/migrations.js';
import { MAX_WORKFLOW_JOBS, type WorkflowInput } from '../src/ledger/workflow-types.js';
import { Producer } from '../src/producer/producer.js';
import { claimAll, freshQueue, mustGet } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';
import { lanewake } from './support/cli.js';

// The ledger's side of workflows (docs/design/workflows.md): what enqueue writes, idempotency, bad input,
// the caller's transaction, settling by hand, workflow cancel, and the upgrade from schema 16.

const created: TestLedger[] = [];
afterEach(async () => {
  await Promise.allSettled(created.splice(0).map((tl) => tl.drop()));
});
async function fresh(migrated = true): Promise<TestLedger> {
  const tl = await createTestLedger({}, migrated);
  created.push(tl);
  return tl;
}

async function count(ledger: Ledger, table: 'items' | 'workflows' | 'workflowJobs' | 'workflowEdges'): Promise<number> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables[table]}`.execute(ledger.db);
  return Number(r.rows[0]?.n);
}

function chain(queue: string, key?: string): WorkflowInput {
  return {
    queue,
    key,
    jobs: {
      a: { type: 't', payload: { x: 1 } },
      b: { type: 't', payload: { y: 2 }, after: ['a'] },
      c: { type: 't', payload: {}, after: ['b', 'a'] },
    },
  };
}

describe('ledger workflows', () => {
  test('only jobs without dependencies are claimable; an end makes the next claimable in its transaction', async () => {
    const { ledger } = await fresh();
    const queue = freshQueue('wf');
    const wf = await ledger.workflows.enqueue(chain(queue));
    expect(await count(ledger, 'workflowEdges')).toBe(3);
    const first = await claimAll(ledger, queue);
    expect(first.map((i) => i.id)).toEqual([wf.jobs.a]);
    expect(await claimAll(ledger, queue)).toEqual([]);
    expect((await ledger.complete(first[0]!, 'A')).won).toBe(true);
    const second = await claimAll(ledger, queue);
    expect(second.map((i) => i.id)).toEqual([wf.jobs.b]);
    // c waits for b still (a has settled: one of its two dependencies).
    const view = await ledger.workflows.get(wf.id);
    expect(await ledger.explain(wf.jobs.c!)).toMatchObject({
      code: 'waiting_for_dependencies',
      details: { workflow: wf.id },
    });
    expect(view?.jobs.find((j) => j.name === 'c')).toMatchObject({
      state: 'waiting',
      depsPending: 1,
      after: ['a', 'b'],
    });
    await ledger.skip(second[0]!, 'nothing to do');
    expect((await claimAll(ledger, queue)).map((i) => i.id)).toEqual([wf.jobs.c]);
    const deps = await ledger.workflows.dependencies(wf.jobs.c!, { limit: 1 });
    expect(deps.dependencies).toHaveLength(1);
    const rest = await ledger.workflows.dependencies(wf.jobs.c!, { after: deps.next, limit: 1 });
    expect(rest.next).toBeNull();
    const all = [...deps.dependencies, ...rest.dependencies].sort((x, y) => x.name.localeCompare(y.name));
    expect(all.map((d) => [d.name, d.state, d.result])).toEqual([
      ['a', 'completed', 'A'],
      ['b', 'skipped', 'nothing to do'],
    ]);
  });

  test('idempotent by key: the same definition returns the first, writing nothing; another is refused', async () => {
    const { ledger } = await fresh();
    const queue = freshQueue('wf');
    const first = await ledger.workflows.enqueue(chain(queue, 'k1'));
    const items = await count(ledger, 'items');
    // The same definition, its jobs written in another order.
    const { a, b, c } = chain(queue, 'k1').jobs;
    const again = await ledger.workflows.enqueue({ queue, key: 'k1', jobs: { c: c!, b: b!, a: a! } });
    expect(again).toEqual({ ...first, duplicate: true });
    expect(await count(ledger, 'items')).toBe(items);
    const other = chain(queue, 'k1');
    other.jobs = { ...other.jobs, a: { type: 't', payload: { x: 2 } } };
    const err = await ledger.workflows.enqueue(other).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkflowConflictError);
    expect(err).toMatchObject({ key: 'k1', workflowId: first.id });
    expect(await count(ledger, 'items')).toBe(items);
    expect(await count(ledger, 'workflows')).toBe(1);
  });

  test('bad input is refused naming the field, and writes nothing', async () => {
    const { ledger } = await fresh();
    const queue = freshQueue('wf');
    const refused = async (input: WorkflowInput): Promise<string[]> => {
      const e = await ledger.workflows.enqueue(input).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(ValidationError);
      return (e as ValidationError).fields;
    };
    expect(
      await refused({
        queue,
        jobs: {
          a: { type: 't', payload: {}, after: ['c'] },
          b: { type: 't', payload: {}, after: ['a'] },
          c: { type: 't', payload: {}, after: ['b'] },
        },
      }),
    ).toEqual(['jobs.a.after']);
    expect(await refused({ queue, jobs: { a: { type: 't', payload: {}, after: ['nope'] } } })).toEqual([
      'jobs.a.after[0]',
    ]);
    expect(await refused({ queue, jobs: { a: { type: 't', payload: {}, after: ['a'] } } })).toEqual([
      'jobs.a.after[0]',
    ]);
    expect(
      await refused({
        queue,
        jobs: { a: { type: 't', payload: {}, lane: 'l' } as never, b: { type: '', payload: {} } },
      }),
    ).toEqual(['jobs.a.lane', 'jobs.b.type']);
    expect(await refused({ jobs: { a: { type: 't', payload: {} } } })).toEqual(['jobs.a.queue']);
    expect(await refused({ queue, jobs: {} })).toEqual(['jobs']);
    expect(await refused({ queue, jobs: { a: 'x' as never, b: { type: 't', payload: {}, after: ['a'] } } })).toEqual([
      'jobs.a',
    ]);
    const many: WorkflowInput['jobs'] = {};
    for (let i = 0; i <= MAX_WORKFLOW_JOBS; i++)
      (many as Record<string, unknown>)[`j${i}`] = { type: 't', payload: {} };
    expect(await refused({ queue, jobs: many })).toEqual(['jobs']);
    expect(await count(ledger, 'items')).toBe(0);
    expect(await count(ledger, 'workflows')).toBe(0);
    expect(await count(ledger, 'workflowJobs')).toBe(0);
  });

  test("in the caller's transaction: it commits with the caller's writes, or rolls back with them", async () => {
    const { ledger } = await fresh();
    const queue = freshQueue('wf');
    const producer = new Producer({ ledger });
    await producer
      .transaction(ledger.db, async (tx) => {
        await tx.workflow(chain(queue));
        throw new Error('caller rolls back');
      })
      .catch(() => undefined);
    expect(await count(ledger, 'workflows')).toBe(0);
    expect(await count(ledger, 'items')).toBe(0);
    const wf = await producer.transaction(ledger.db, (tx) => tx.workflow(chain(queue)));
    expect(await count(ledger, 'items')).toBe(3);
    expect((await claimAll(ledger, queue)).map((i) => i.id)).toEqual([wf.jobs.a]);
  });

  test('cancelling a workflow cancels its jobs not started; a running one still settles', async () => {
    const { ledger } = await fresh();
    const queue = freshQueue('wf');
    const wf = await ledger.workflows.enqueue({
      queue,
      jobs: {
        a: { type: 't', payload: {} },
        b: { type: 't', payload: {}, after: ['a'] },
        c: { type: 't', payload: {}, after: ['b'] },
        // Not due yet: pending, not started, and not claimed below.
        z: { type: 't', payload: {}, delayMs: 600_000 },
      },
    });
    const [running] = (await claimAll(ledger, queue)).filter((i) => i.id === wf.jobs.a);
    expect(await ledger.workflows.cancel(wf.id)).toBe(3);
    expect(await ledger.workflows.cancel('nope')).toBeUndefined();
    expect((await ledger.complete(running!, null)).won).toBe(true);
    const view = await ledger.workflows.get(wf.id);
    expect(view?.state).toBe('cancelled');
    expect(Object.fromEntries(view!.jobs.map((j) => [j.name, j.state]))).toEqual({
      a: 'completed',
      b: 'cancelled',
      c: 'cancelled',
      z: 'cancelled',
    });
    expect(await claimAll(ledger, queue)).toEqual([]);
  });

  test('an operator cancel of a waiting job cascades under the cancel policy', async () => {
    const { ledger } = await fresh();
    const queue = freshQueue('wf');
    const wf = await ledger.workflows.enqueue(chain(queue));
    expect(await ledger.cancel(wf.jobs.b!)).toBe('cancelled');
    expect((await mustGet(ledger, wf.jobs.c!)).state).toBe('cancelled');
    expect((await mustGet(ledger, wf.jobs.a!)).state).toBe('pending');
  });

  test('schema 16 -> 17 in place: items written before still run, and workflows work', async () => {
    const { ledger } = await fresh(false);
    await migrate(ledger.db, 'lw_', 60, 16);
    const queue = freshQueue('wf');
    const old = await ledger.enqueueMany([
      { queue, type: 't', payload: 1 },
      { queue, type: 't', payload: 2, lane: 'l' },
    ]);
    const up = await ledger.migrate();
    // 17 and every step after it (18: queue settings), in order.
    expect(up).toEqual({
      from: 16,
      to: SCHEMA_VERSION,
      applied: Array.from({ length: SCHEMA_VERSION - 16 }, (_, i) => 17 + i),
    });
    expect((await mustGet(ledger, old[0]!.id)).workflowId).toBeUndefined();
    const claimed = await claimAll(ledger, queue);
    expect(claimed.map((i) => i.id).sort()).toEqual(old.map((r) => r.id).sort());
    for (const item of claimed) expect((await ledger.complete(item, null)).won).toBe(true);
    const wf = await ledger.workflows.enqueue(chain(queue));
    expect((await claimAll(ledger, queue)).map((i) => i.id)).toEqual([wf.jobs.a]);
    expect(await ledger.migrate()).toEqual({ from: SCHEMA_VERSION, to: SCHEMA_VERSION, applied: [] });
    // On TiDB each schema step is a DDL job of its own: the whole upgrade takes minutes on a loaded machine.
  }, 300_000);
});

describe('lanewake workflow <id>', () => {
  test('prints the graph with each job state in dependency order; --cancel cascades', async () => {
    const tl = await fresh();
    const queue = freshQueue('wf');
    const wf = await tl.ledger.workflows.enqueue({ ...chain(queue), name: 'nightly' });
    const shown = await lanewake(['--database-url', tl.url, 'workflow', wf.id]);
    expect(shown.code).toBe(0);
    const lines = shown.out.split('\n');
    expect(lines[0]).toBe(`workflow ${wf.id} "nightly": running, on failure cancel`);
    const table = lines.slice(lines.findIndex((l) => l.startsWith('JOB')) + 1).filter((l) => l.trim() !== '');
    expect(table.map((l) => l.split(/\s+/).slice(0, 2))).toEqual([
      ['a', 'pending'],
      ['b', 'waiting'],
      ['c', 'waiting'],
    ]);
    expect(table[2]).toContain('a, b');
    const cancelled = await lanewake(['--database-url', tl.url, 'workflow', wf.id, '--cancel', '--json']);
    expect(JSON.parse(cancelled.out)).toMatchObject({ state: 'cancelled', cancelledJobs: 3 });
    const missing = await lanewake(['--database-url', tl.url, 'workflow', 'nope']);
    expect(missing.code).toBe(1);
  });
});
