// Queue settings in the ledger (docs/design/supervisor.md, "Queue settings in the ledger"): `queue update` changes a
// queue's slots, fleet cap and key limit on every worker at its next read of the ledger's queues (each reconcile
// interval; how long it took is measured, not asserted), without a restart; a value a worker's config sets is
// pinned there; bad input writes nothing; a queue deleted and made again is a new incarnation: the worker replaces
// its consumers, and a holder of an old item has its completion refused, nothing written.
import { sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { LeaseLostError, ValidationError } from '../src/errors.js';
import { Producer } from '../src/producer/producer.js';
import { migrate } from '../src/ledger/migrations.js';
import type { HandlersByQueue } from '../src/supervisor/handlers-module.js';
import type { Supervisor } from '../src/supervisor/supervisor.js';
import { lanewake } from './support/cli.js';
import { uniqueQueue, type TestWake } from './support/engine.js';
import { inlineWorker, workerFixtures } from './support/inline-worker.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

const RECONCILE_MS = 1_000;
/** The deadline of a wait: generous, as a loaded machine (TiDB most) claims slowly; the time taken is measured. */
const DEADLINE_MS = 30_000;
const figures = process.env.LANEWAKE_TEST_QUEUE_SETTINGS_FIGURES !== undefined;

const fixtures = () => workerFixtures(cleanups);

type Handler = (job: { id: string }) => Promise<unknown>;

function worker(
  tl: TestLedger,
  tw: TestWake,
  queue: Record<string, unknown>,
  handlers: Record<string, Handler>,
): Supervisor {
  return inlineWorker({ tl, tw }, cleanups, {
    reconcileIntervalMs: RECONCILE_MS,
    queues: [queue],
    handlers: { [String(queue.name)]: handlers } as HandlersByQueue,
  });
}

/** Handlers that hold every item until released, counting those running. */
function holding(): { handlers: Record<string, Handler>; release: () => void } {
  let open: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (open = resolve));
  return { handlers: { job: () => gate }, release: () => open() };
}

const running = (sup: Supervisor, queue: string): number =>
  (sup.runners.get(queue) ?? []).reduce((n, r) => n + (r.current?.inFlight ?? 0), 0);

/** Waits until every worker runs `each` items of `queue`. */
async function untilEachRuns(workers: Supervisor[], queue: string, each: number[], what: string): Promise<void> {
  await waitFor(() => workers.every((w, i) => running(w, queue) === each[i]) || undefined, DEADLINE_MS, what);
}

/** Waits until every consumer of `queue` on `workers` runs with `check` true; returns how long it took (ms). */
async function untilApplied(
  workers: Supervisor[],
  queue: string,
  check: (settings: { concurrency: number; maxProcessing?: number | undefined }) => boolean,
  what: string,
): Promise<number> {
  const from = Date.now();
  const applied = () =>
    workers.every((w) => (w.runners.get(queue) ?? []).every((r) => r.current && check(r.current.settings)));
  await waitFor(() => applied() || undefined, DEADLINE_MS, what);
  return Date.now() - from;
}

describe('queue settings changed live', () => {
  test('slots: every worker takes the new value within one interval; a pinned one keeps its own', async () => {
    const { tl, tw } = await fixtures();
    const queue = uniqueQueue('slots');
    const { handlers, release } = holding();
    await tl.ledger.createQueue(queue, { slots: 1 });
    const free = [worker(tl, tw, { name: queue }, handlers), worker(tl, tw, { name: queue }, handlers)];
    const pinned = worker(tl, tw, { name: queue, concurrency: 2 }, handlers);
    const all = [...free, pinned];
    for (const w of all) await w.start();
    cleanups.push(async () => release());
    await tl.ledger.enqueueMany(Array.from({ length: 40 }, () => ({ queue, type: 'job', payload: {} })));
    await untilEachRuns(all, queue, [1, 1, 2], 'the ledger slots (1) and the pinned ones (2) full');
    expect(free[0]!.served()[0]?.settings?.slots).toEqual({ value: 1, from: 'ledger' });
    expect(pinned.served()[0]?.settings?.slots).toEqual({ value: 2, from: 'config' });

    await tl.ledger.updateQueue(queue, { slots: 3 });
    const raised = await untilApplied(free, queue, (s) => s.concurrency === 3, 'slots 3 on every unpinned worker');
    await untilEachRuns(all, queue, [3, 3, 2], 'three running on every unpinned worker, two on the pinned one');
    expect(free[1]!.served()[0]?.settings?.slots).toEqual({ value: 3, from: 'ledger' });
    // Cleared: each worker's own value, here the default.
    await tl.ledger.updateQueue(queue, { slots: null });
    const cleared = await untilApplied(free, queue, (s) => s.concurrency === 10, 'slots back to the default 10');
    await untilEachRuns(all, queue, [10, 10, 2], 'ten running on every unpinned worker');
    expect(free[0]!.served()[0]?.settings?.slots).toEqual({ value: 10, from: 'default' });
    if (figures) console.info({ slotsRaisedMs: raised, slotsClearedMs: cleared, intervalMs: RECONCILE_MS });
  }, 180_000);

  test('the fleet cap (maxProcessing) and the key limit (concurrencyLimit) change on every worker', async () => {
    const { tl, tw } = await fixtures();
    const queue = uniqueQueue('cap');
    const { handlers, release } = holding();
    await tl.ledger.createQueue(queue, { slots: 5, maxProcessing: 2 });
    const workers = [worker(tl, tw, { name: queue }, handlers), worker(tl, tw, { name: queue }, handlers)];
    for (const w of workers) await w.start();
    cleanups.push(async () => release());
    await tl.ledger.enqueueMany(Array.from({ length: 30 }, () => ({ queue, type: 'job', payload: {} })));
    const total = () => workers.reduce((n, w) => n + running(w, queue), 0);
    await waitFor(() => total() === 2 || undefined, DEADLINE_MS, 'the cap of 2 reached');
    expect(await tl.ledger.countProcessing(queue)).toBe(2);

    await tl.ledger.updateQueue(queue, { maxProcessing: 6 });
    const capMs = await untilApplied(workers, queue, (s) => s.maxProcessing === 6, 'the cap 6 on every worker');
    await waitFor(() => total() === 6 || undefined, DEADLINE_MS, 'six running under the cap raised to 6');
    expect(await tl.ledger.countProcessing(queue)).toBe(6);
    expect(workers.every((w) => w.served()[0]?.settings?.maxProcessing.value === 6)).toBe(true);

    // A key limit is the ledger's own (admission): raised, the waiting items of the key are admitted at once.
    const keyed = uniqueQueue('key');
    await tl.ledger.createQueue(keyed, { slots: 10, concurrencyLimit: 1 });
    const held = holding();
    const keyWorkers = [worker(tl, tw, { name: keyed }, held.handlers), worker(tl, tw, { name: keyed }, held.handlers)];
    for (const w of keyWorkers) await w.start();
    cleanups.push(async () => held.release());
    await tl.ledger.enqueueMany(
      Array.from({ length: 10 }, () => ({ queue: keyed, type: 'job', payload: {}, concurrencyKey: 'tenant' })),
    );
    const keyedTotal = () => keyWorkers.reduce((n, w) => n + running(w, keyed), 0);
    await waitFor(() => keyedTotal() === 1 || undefined, DEADLINE_MS, 'one item of the key running');
    const from = Date.now();
    await tl.ledger.updateQueue(keyed, { concurrencyLimit: 4 });
    // Admitted by the write itself; claimed once a worker's read sees the change and kicks its consumers.
    await waitFor(() => keyedTotal() === 4 || undefined, DEADLINE_MS, 'four items of the key running');
    const limitMs = Date.now() - from;
    expect((await tl.ledger.concurrencyLimits(keyed)).limit).toBe(4);
    if (figures) console.info({ maxProcessingAppliedMs: capMs, concurrencyLimitRunningMs: limitMs });
  }, 180_000);

  test('bad input: a typed error naming the field, nothing written', async () => {
    const { tl } = await fixtures();
    const queue = uniqueQueue('bad');
    await tl.ledger.createQueue(queue, { slots: 4 });
    const fieldsOf = async (p: Promise<unknown>) => {
      const error = await p.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ValidationError);
      return (error as ValidationError).issues.map((i) => i.field);
    };
    expect(await fieldsOf(tl.ledger.updateQueue(queue, { slots: 5, maxProcessing: 0 }))).toEqual([
      'settings.maxProcessing',
    ]);
    expect(await fieldsOf(tl.ledger.updateQueue(queue, { slots: 1001 }))).toEqual(['settings.slots']);
    expect(await fieldsOf(tl.ledger.updateQueue(queue, { slots: 2.5 }))).toEqual(['settings.slots']);
    expect(await fieldsOf(tl.ledger.updateQueue(queue, {}))).toEqual(['settings']);
    expect(await fieldsOf(tl.ledger.updateQueue(queue, { lease: 5 } as never))).toEqual(['settings.lease']);
    expect(await fieldsOf(tl.ledger.createQueue(`${queue}-x`, { concurrencyLimit: 0 }))).toEqual([
      'settings.concurrencyLimit',
    ]);
    const [row] = await tl.ledger.queueRows([queue]);
    expect(row).toMatchObject({ slots: 4, maxProcessing: null, concurrencyLimit: null });
    expect(await tl.ledger.queueRows([`${queue}-x`])).toEqual([]);

    const cli = (...args: string[]) => lanewake(['--database-url', tl.url, 'queue', ...args]);
    const zero = await cli('update', queue, '--slots', '0', '--max-processing', '7');
    expect(zero.code).toBe(2);
    expect(zero.err).toMatch(/--slots/);
    const text = await cli('update', queue, '--max-processing', 'lots');
    expect(text.code).toBe(2);
    expect(text.err).toMatch(/--max-processing/);
    const none = await cli('update', queue);
    expect(none.code).toBe(2);
    expect(none.err).toMatch(/at least one setting/);
    expect((await tl.ledger.queueRows([queue]))[0]).toMatchObject({ slots: 4, maxProcessing: null });
    const ok = await cli('update', queue, '--slots', 'none', '--max-processing', '7', '--paused', '--json');
    expect(ok.code, ok.err).toBe(0);
    expect((await tl.ledger.queueRows([queue]))[0]).toMatchObject({ slots: null, maxProcessing: 7, paused: true });
    expect((await cli('list')).out).toContain(`${queue}  paused  max-processing=7`);
  }, 120_000);
});

describe('queue incarnations', () => {
  test('schema 18 on a ledger with queues: each row gets an incarnation, its settings unset', async () => {
    const tl = await createTestLedger({}, false);
    cleanups.push(() => tl.drop());
    await migrate(tl.ledger.db, tl.ledger.tables.prefix, 60, 16);
    await sql`INSERT INTO ${tl.ledger.tables.queues} (queue, capped_claims, updated_at, key_limit)
      VALUES ('before-18', 0, NOW(6), 3)`.execute(tl.ledger.db);
    expect((await tl.ledger.migrate()).applied).toContain(18);
    const [row] = await tl.ledger.queueRows(['before-18']);
    expect(row).toMatchObject({ slots: null, maxProcessing: null, concurrencyLimit: 3 });
    expect(row!.incarnation).toBeGreaterThan(0);
  });

  test('made again while a holder has an old item: its completion is refused, nothing written', async () => {
    const { tl, tw } = await fixtures();
    const queue = uniqueQueue('inc');
    const ran: string[] = [];
    const sup = worker(tl, tw, { name: queue, types: ['job'] }, { job: async (job) => void ran.push(job.id) });
    await sup.start();
    const oldRunner = sup.runners.get(queue)?.[0];
    // A stalled holder of the old incarnation (a process paused past its lease): it claimed and renews nothing.
    const held = await tl.ledger.enqueue({ queue, type: 'hold', payload: {}, maxAttempts: 1 });
    const [before] = await tl.ledger.queueRows([queue]);
    const claimed = await tl.ledger.claim({ queue, owner: 'stalled', limit: 1, leaseMs: 100, types: ['hold'] });
    expect(claimed.items.map((i) => i.id)).toEqual([held.id]);
    // The worker's reconciler finds the lease expired: its one attempt spent, the item ends dead.
    await waitFor(
      async () => (await tl.ledger.get(held.id))?.state === 'dead' || undefined,
      DEADLINE_MS,
      'old item dead',
    );

    await tl.ledger.setDrainOnly(queue, true);
    // The delete waits for producers to learn the flag; here the clock is moved instead of waited out.
    await sql`UPDATE ${sql.table(`${tl.ledger.tables.prefix}queues`)}
      SET drain_since = NOW(6) - INTERVAL 1 MINUTE WHERE queue = ${queue}`.execute(tl.ledger.db);
    expect(await tl.ledger.deleteQueue(queue)).toEqual({ items: 1 });
    expect(await tl.ledger.createQueue(queue, { slots: 2 })).toBe(true);
    const [after] = await tl.ledger.queueRows([queue]);
    expect(after!.incarnation).toBeGreaterThan(before!.incarnation);

    // The worker replaces the queue's consumers at its next read of the ledger's queues.
    await waitFor(() => sup.runners.get(queue)?.[0] !== oldRunner || undefined, DEADLINE_MS, 'replaced');
    expect(sup.served()[0]).toMatchObject({ queue, why: 'pinned', incarnation: after!.incarnation });
    const fresh = await tl.ledger.enqueue({ queue, type: 'job', payload: {} });
    await waitFor(() => ran.includes(fresh.id) || undefined, DEADLINE_MS, 'the new incarnation served');
    // Run by the new incarnation's consumer; the old one, stopped, claimed nothing.
    expect(sup.runners.get(queue)?.[0]?.current?.counters.claimed).toBe(1);
    expect(oldRunner?.current?.counters.claimed).toBe(0);

    // The stalled holder comes back and completes, enqueuing a follow-up in the same transaction: fenced by its
    // lease token, whose row went with the old incarnation, it is refused and nothing commits.
    const producer = new Producer({ ledger: tl.ledger });
    await expect(
      tl.ledger.completeWithin(claimed.items[0]!, async (trx) => {
        await producer.enqueueWithin(trx, [{ queue, type: 'job', payload: { from: 'old' } }]);
      }),
    ).rejects.toBeInstanceOf(LeaseLostError);
    expect(await tl.ledger.get(held.id)).toBeUndefined();
    const items = await sql<{ id: string }>`SELECT id FROM ${sql.table(`${tl.ledger.tables.prefix}items`)}
      WHERE queue = ${queue}`.execute(tl.ledger.db);
    expect(items.rows.map((r) => r.id)).toEqual([fresh.id]);
    expect(await tl.ledger.get(fresh.id)).toMatchObject({ state: 'completed', attempt: 1 });
  }, 180_000);
});
