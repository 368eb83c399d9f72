import { sql } from 'kysely';
import { Redis } from 'ioredis';
import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import type { Outcome } from '../src/consumer/job-run.js';
import type { Job, JobContext } from '../src/consumer/types.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { LeaseLostError } from '../src/errors.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { Producer } from '../src/producer/producer.js';
import { wakeStreamKey } from '../src/wake/keys.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { createEffectsTable, effectCount, effectHandler, insertEffect, nowUs, readEffects, type EffectsDB, type StepPayload } from './support/effects.js';
import { createTestWake, deleteKeys, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { ChildConsumer, PrivateRedis } from './support/processes.js';
import { redisUrl } from './support/services.js';

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
let cleanups: (() => Promise<unknown>)[] = [];

/** A cleanup step that cannot hang the hook (a stuck one is reported, and the rest still run). */
async function bounded(step: () => Promise<unknown>, ms = 15_000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    step().catch(() => undefined),
    new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        console.error(`cleanup step did not finish within ${ms} ms: ${step.toString().slice(0, 80)}`);
        resolve();
      }, ms);
    }),
  ]);
  clearTimeout(timer);
}

afterEach(async () => {
  for (const c of cleanups.reverse()) await bounded(c);
  cleanups = [];
  await tw?.drop();
  await tl?.drop();
  tw = undefined;
  tl = undefined;
});

async function countInState(ledger: Ledger, queue: string, state: string): Promise<number> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items}
    WHERE queue = ${queue} AND state = ${state}`.execute(ledger.db);
  return Number(r.rows[0]?.n ?? -1);
}

/** Items `owner` holds; with `startedWithinMs`, only those whose run began that recently (ledger clock). */
async function idsHeldBy(ledger: Ledger, queue: string, owner: string, startedWithinMs?: number): Promise<string[]> {
  const recent = startedWithinMs === undefined ? sql`` : sql`AND started_at > NOW(6) - INTERVAL ${startedWithinMs * 1000} MICROSECOND`;
  const r = await sql<{ id: string }>`SELECT id FROM ${ledger.tables.items}
    WHERE queue = ${queue} AND state = 'processing' AND lease_owner = ${owner} ${recent}`.execute(ledger.db);
  return r.rows.map((x) => x.id);
}

function lanedInputs(queue: string, count: number, lanes: number, from = 0) {
  return Array.from({ length: count }, (_, i) => ({
    queue,
    type: 'step',
    lane: `lane-${(from + i) % lanes}`,
    payload: { n: Math.floor((from + i) / lanes) } satisfies StepPayload,
  }));
}

test('a consumer process killed with SIGKILL mid-handler: its items are reclaimed after the lease and completed by the others, once', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const { ledger } = tl;
  await createEffectsTable(ledger);
  const queue = uniqueQueue('kill');
  const ITEMS = 80;
  const LEASE_MS = 1200;

  const child = new ChildConsumer({
    dbUrl: tl.url,
    redisUrl: redisUrl(),
    keyPrefix: tw.keyPrefix,
    queue,
    name: `${queue}-doomed`,
    concurrency: 4,
    leaseMs: LEASE_MS,
    workMs: 250,
  });
  cleanups.push(() => child.kill());
  const survivorName = `${queue}-survivor`;
  const survivor = new Consumer<EffectsDB>({
    ledger,
    wake: tw.wake,
    queue,
    name: survivorName,
    concurrency: 4,
    leaseMs: LEASE_MS,
    pollIntervalMs: 200,
    handlers: { step: effectHandler(survivorName, { fixedWorkMs: 20 }) },
  });
  cleanups.push(() => survivor.stop({ drainTimeoutMs: 1000 }));
  await child.waitReady();
  await survivor.start();

  // A producer elsewhere: its wake-ups go through the stream to both consumers, not straight to the survivor.
  const producer = new Producer({ ledger, wake: tw.remote() });
  const results = await producer.enqueueMany(lanedInputs(queue, ITEMS, 16));

  // Kill the child without warning while it holds an item it claimed at most 100 ms ago: that
  // item's 250 ms of work cannot have finished, so the kill always strands work.
  await waitFor(
    async () => (await idsHeldBy(ledger, queue, child.name, 100)).length > 0,
    30_000,
    'the child to be mid-work',
  );
  const exit = await child.kill();
  expect(exit.signal).toBe('SIGKILL');
  const stranded = await idsHeldBy(ledger, queue, child.name);
  expect(stranded.length, 'items the killed child still held').toBeGreaterThan(0);

  await waitFor(async () => (await countInState(ledger, queue, 'completed')) === ITEMS || undefined, 45_000, 'every item completed');

  const effects = await readEffects(ledger);
  expect(effects).toHaveLength(ITEMS);
  expect(new Set(effects.map((e) => e.itemId))).toEqual(new Set(results.map((r) => r.id)));
  const [stats] = await ledger.stats(queue);
  expect(stats?.counts.completed).toBe(ITEMS);
  expect(stats?.counts.processing).toBe(0);
  expect(stats?.counts.dead).toBe(0);

  for (const id of stranded) {
    const r = await ledger.inspect(id);
    expect(r?.item.state).toBe('completed');
    // The expired attempt is on record, counted, and the item ended with the survivor.
    expect(r?.attempts.map((a) => [a.outcome, a.worker])).toContainEqual(['lease_expired', child.name]);
    expect(r?.item.attempt).toBeGreaterThanOrEqual(2);
    expect(r?.item.leaseOwner).toBe(survivorName);
    expect(effects.find((e) => e.itemId === id)?.worker).toBe(survivorName);
  }
  expect(survivor.counters.completed).toBe(effects.filter((e) => e.worker === survivorName).length);
  expect(survivor.counters.retried).toBe(0);
  expect(survivor.counters.leaseLost).toBe(0);
});

test('Redis stopped mid-run: enqueue still commits, work completes by sweeping, wake-ups resume when Redis returns', async () => {
  tl = await createTestLedger();
  const { ledger } = tl;
  const queue = uniqueQueue('redis-down');
  const redis = await PrivateRedis.start();
  const keyPrefix = `lwt:${queue}:`;
  // The producer and the consumer each have a channel of their own on the private server.
  const pubWake = new WakeChannel({ redis: redis.url, keyPrefix });
  const conWake = new WakeChannel({ redis: redis.url, keyPrefix });
  const done: string[] = [];
  const consumer = new Consumer({
    ledger,
    wake: conWake,
    queue,
    concurrency: 4,
    pollIntervalMs: 60_000, // while Redis is up, only wake-ups bring work in
    redisDownPollMs: 200,
    readBlockMs: 200,
    handlers: {
      step: async (job: Job<StepPayload>) => {
        done.push(job.id);
      },
    },
  });
  cleanups.push(
    () => redis.destroy(),
    () => deleteKeys(redis.url, keyPrefix),
    () => conWake.close(),
    () => pubWake.close(),
    () => consumer.stop({ drainTimeoutMs: 1000 }),
  );
  await consumer.start();
  const producer = new Producer({ ledger, wake: pubWake });
  const completed = () => countInState(ledger, queue, 'completed');

  // Phase 1: Redis up (and the producer's connection made: a loaded machine can take over a second).
  await waitFor(() => pubWake.connected() || undefined, 10_000, 'the producer connected');
  await producer.enqueueMany(lanedInputs(queue, 20, 5));
  await waitFor(async () => (await completed()) === 20 || undefined, 15_000, 'phase 1 completed');
  expect(consumer.counters.wakeEntriesRead).toBeGreaterThan(0);
  expect(pubWake.counters.failed).toBe(0);

  // Phase 2: Redis gone. The enqueue commits; its wake-up is counted as failed; the sweep finds the work.
  await redis.kill();
  const failedBefore = pubWake.counters.failed;
  const publishedBefore = pubWake.counters.published;
  const phase2 = await producer.enqueueMany(lanedInputs(queue, 20, 5, 20));
  expect(phase2).toHaveLength(20);
  expect(pubWake.counters.failed).toBeGreaterThan(failedBefore);
  expect(pubWake.counters.published).toBe(publishedBefore);
  await waitFor(async () => (await completed()) === 40 || undefined, 20_000, 'phase 2 completed by sweeping');
  expect(consumer.redisConnected).toBe(false);
  for (const r of phase2) expect((await ledger.get(r.id))?.state).toBe('completed');

  // Phase 3: Redis back on the same port (empty: the streams and the group are gone). Wake-ups resume.
  await redis.start();
  await waitFor(() => (consumer.redisConnected && pubWake.connected()) || undefined, 20_000, 'both sides reconnected');
  const readBefore = consumer.counters.wakeEntriesRead;
  const publishedAfterRestart = pubWake.counters.published;
  const phase3 = await producer.enqueueMany(lanedInputs(queue, 20, 5, 40));
  expect(pubWake.counters.published).toBeGreaterThan(publishedAfterRestart);
  await waitFor(async () => (await completed()) === 60 || undefined, 20_000, 'phase 3 completed');
  // The sweep run on reconnecting may claim phase 3 before its wake-up is read; the read still comes.
  await waitFor(() => consumer.counters.wakeEntriesRead > readBefore || undefined, 10_000, 'phase 3 wake-ups read');
  expect(consumer.counters.wakeEntriesRead).toBeGreaterThan(readBefore);
  for (const r of phase3) expect((await ledger.get(r.id))?.state).toBe('completed');

  const [stats] = await ledger.stats(queue);
  expect(stats?.counts).toMatchObject({ completed: 60, pending: 0, processing: 0, dead: 0 });
  expect(new Set(done).size).toBe(60);
  expect(done).toHaveLength(60);
}, 90_000);

test('closing a consumer and its wake channel while Redis is down does not hang', async () => {
  tl = await createTestLedger();
  const queue = uniqueQueue('close-down');
  const redis = await PrivateRedis.start();
  const wake = new WakeChannel({ redis: redis.url, keyPrefix: `lwt:${queue}:` });
  const consumer = new Consumer({ ledger: tl.ledger, wake, queue, redisDownPollMs: 200, readBlockMs: 200, handlers: { step: async () => undefined } });
  cleanups.push(() => redis.destroy());
  await consumer.start();
  const producer = new Producer({ ledger: tl.ledger, wake });
  await producer.enqueue({ queue, type: 'step', payload: {} });
  await waitFor(() => consumer.counters.completed === 1 || undefined, 15_000, 'the item completed');
  await redis.kill();
  await waitFor(() => !consumer.redisConnected || undefined, 10_000, 'the consumer to notice');

  let timer: NodeJS.Timeout | undefined;
  const closed = (async () => {
    await consumer.stop({ drainTimeoutMs: 1000 });
    await wake.close();
    return 'closed';
  })();
  const outcome = await Promise.race([closed, new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still closing after 15 s'), 15_000)))]);
  clearTimeout(timer);
  expect(outcome).toBe('closed');
});

test('a rolled-back producer.transaction leaves no item and publishes no wake-up', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const { ledger } = tl;
  await createEffectsTable(ledger);
  const queue = uniqueQueue('rollback');
  const producer = new Producer({ ledger, wake: tw.wake });
  const streamKey = wakeStreamKey(tw.keyPrefix, queue, 'default');
  const r = new Redis(redisUrl());
  cleanups.push(async () => r.disconnect());

  let enqueuedId: string | undefined;
  const boom = new Error('the caller changed its mind');
  await expect(
    producer.transaction(ledger.db, async (tx) => {
      const e = await tx.enqueue({ queue, type: 'step', lane: 'a', payload: { n: 0 } });
      enqueuedId = e.id;
      // The caller's own write in the same transaction.
      await sql`INSERT INTO effects (item_id, worker, started_at_us, ended_at_us) VALUES (${e.id}, 'producer', 0, 0)`.execute(tx.trx);
      throw boom;
    }),
  ).rejects.toBe(boom);

  expect(enqueuedId).toBeDefined();
  expect(await ledger.get(enqueuedId!)).toBeUndefined();
  expect(await ledger.stats(queue)).toEqual([]);
  expect(await effectCount(ledger)).toBe(0);
  expect(await r.xlen(streamKey)).toBe(0);
  expect(tw.wake.counters).toEqual({ published: 0, deliveredLocally: 0, failed: 0 });

  // The same transaction committed does both (so the checks above can see an item and a wake-up).
  const committed = await producer.transaction(ledger.db, async (tx) => {
    const e = await tx.enqueue({ queue, type: 'step', lane: 'a', payload: { n: 1 } });
    await sql`INSERT INTO effects (item_id, worker, started_at_us, ended_at_us) VALUES (${e.id}, 'producer', 0, 0)`.execute(tx.trx);
    return e;
  });
  expect((await ledger.get(committed.id))?.state).toBe('pending');
  expect(await effectCount(ledger)).toBe(1);
  expect(await r.xlen(streamKey)).toBe(1);
  expect(tw.wake.counters.published).toBe(1);
});

test('a handler whose lease was stolen cannot complete: ctx.transaction throws LeaseLostError and its writes roll back', async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const { ledger } = tl;
  await createEffectsTable(ledger);
  const queue = uniqueQueue('steal');
  const stolenToken = 'stolen-token-0000000000';
  let txError: unknown;
  const consumer = new Consumer<EffectsDB>({
    ledger,
    wake: tw.wake,
    queue,
    concurrency: 2,
    leaseMs: 60_000,
    handlers: {
      step: async (job: Job<StepPayload>, ctx: JobContext<EffectsDB>) => {
        const startedAtUs = nowUs();
        // Another holder takes the item over (as a reclaim after expiry would): the token changes under us.
        await sql`UPDATE ${ledger.tables.items} SET lease_token = ${stolenToken}, lease_owner = 'thief'
          WHERE id = ${job.id}`.execute(ledger.db);
        try {
          await ctx.transaction((trx) => insertEffect(trx, job, 'victim', startedAtUs));
        } catch (error) {
          txError = error;
          throw error;
        }
      },
    },
  });
  const outcomes: [ClaimedItem, Outcome][] = [];
  consumer.on('outcome', (item, outcome) => outcomes.push([item, outcome]));
  cleanups.push(() => consumer.stop({ drainTimeoutMs: 1000 }));
  await consumer.start();
  const producer = new Producer({ ledger, wake: tw.wake });
  const { id } = await producer.enqueue({ queue, type: 'step', lane: 'a', payload: { n: 0 } });

  await waitFor(() => outcomes.length > 0 || undefined, 15_000, 'an outcome');
  expect(txError).toBeInstanceOf(LeaseLostError);
  expect(outcomes.map(([item, o]) => [item.id, o])).toEqual([[id, 'leaseLost']]);
  expect(consumer.counters.leaseLost).toBe(1);
  expect(consumer.counters.completed).toBe(0);
  expect(await effectCount(ledger)).toBe(0);

  // The item stays with the thief: not completed, not released, not retried by the victim.
  const r = await ledger.inspect(id);
  expect(r?.item).toMatchObject({ state: 'processing', leaseToken: stolenToken, leaseOwner: 'thief', result: null });
  expect(r?.attempts).toEqual([]);
});
