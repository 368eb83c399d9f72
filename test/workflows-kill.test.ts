import { sql } from 'kysely';
import { afterEach, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import type { WorkflowInput } from '../src/ledger/workflow-types.js';
import { Producer } from '../src/producer/producer.js';
import { createEffectsTable, readEffects } from './support/effects.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { ChildConsumer } from './support/processes.js';
import { redisUrl } from './support/services.js';

// A workflow's worker SIGKILLed at random points, again and again: each job still runs to completion once
// (the effects table's primary key, written with the completion), every job after all it depends on,
// and the last job once. Its end and its dependents' release commit together, so no kill can lose a
// release or make one twice.

const KILLS = 8;
const WORK_MS = 150;
const LEASE_MS = 1000;

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
const children: ChildConsumer[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) await c.kill().catch(() => undefined);
  await tw?.drop();
  await tl?.drop();
  tl = undefined;
  tw = undefined;
});

async function heldBy(ledger: Ledger, queue: string, owner: string): Promise<number> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items}
    WHERE queue = ${queue} AND state = 'processing' AND lease_owner = ${owner}`.execute(ledger.db);
  return Number(r.rows[0]?.n);
}

test(`a DAG of 6 whose worker is SIGKILLed ${KILLS} times mid-work runs each job once, in order`, async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const { ledger } = tl;
  await createEffectsTable(ledger);
  const queue = uniqueQueue('wfkill');
  const def: WorkflowInput = {
    queue,
    jobs: {
      a: { type: 'step', payload: { n: 0 } },
      b: { type: 'step', payload: { n: 1 }, after: ['a'] },
      c: { type: 'step', payload: { n: 2 }, after: ['b'] },
      d: { type: 'step', payload: { n: 3 }, after: ['b'] },
      e: { type: 'step', payload: { n: 4 }, after: ['a'] },
      f: { type: 'step', payload: { n: 5 }, after: ['c', 'd', 'e'] },
    },
  };
  const wf = await new Producer({ ledger, wake: tw.wake }).workflow(def);
  const allDone = async (): Promise<boolean> => {
    const view = await ledger.workflows.get(wf.id);
    return view?.jobs.every((j) => j.state === 'completed') === true;
  };
  const start = (round: number): ChildConsumer => {
    const child = new ChildConsumer({
      dbUrl: tl!.url,
      redisUrl: redisUrl(),
      keyPrefix: tw!.keyPrefix,
      queue,
      name: `${queue}-${round}`,
      concurrency: 2,
      leaseMs: LEASE_MS,
      pollIntervalMs: 200,
      workMs: WORK_MS,
    });
    children.push(child);
    return child;
  };
  let kills = 0;
  for (let round = 0; kills < KILLS && !(await allDone()); round++) {
    const child = start(round);
    await child.waitReady(120_000);
    // Kill once it holds a job (or everything ended meanwhile), then at a random point of that job's work: before
    // its effect, or while its completion and its dependents' release commit.
    const holding = await waitFor(
      async () => ((await heldBy(ledger, queue, child.name)) > 0 ? 'holding' : (await allDone()) ? 'done' : undefined),
      120_000,
      'the child to hold a job',
    );
    if (holding === 'holding') await new Promise((r) => setTimeout(r, Math.random() * WORK_MS * 1.2));
    const exit = await child.kill();
    expect(exit.signal).toBe('SIGKILL');
    kills++;
  }
  // A last worker, left alone, finishes what the kills left (its sweeps reclaim the expired leases).
  const last = start(KILLS);
  await last.waitReady(120_000);
  await waitFor(async () => (await allDone()) || undefined, 240_000, 'every job completed');

  const effects = new Map((await readEffects(ledger)).map((e) => [e.itemId, e]));
  expect(effects.size).toBe(6);
  for (const [name, job] of Object.entries(def.jobs)) {
    const mine = effects.get(wf.jobs[name]!);
    expect(mine, `the effect of ${name}`).toBeDefined();
    for (const parent of job.after ?? [])
      expect(mine!.startedAtUs, `${name} started after ${parent} ended`).toBeGreaterThan(
        effects.get(wf.jobs[parent]!)!.endedAtUs,
      );
  }
  const view = await ledger.workflows.get(wf.id);
  expect(view?.jobs.map((j) => j.depsPending)).toEqual(view?.jobs.map(() => 0));
  // The kills stranded work: some job's attempt ended by its lease expiring, and the job still ran once.
  const expired = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.attempts}
    WHERE outcome = 'lease_expired' AND item_id IN (${sql.join(Object.values(wf.jobs))})`.execute(ledger.db);
  expect(Number(expired.rows[0]?.n)).toBeGreaterThan(0);
}, 900_000);
