/**
 * The engine's fault scenarios, written once and run against each kind of
 * Redis (one server: test/engine-faults.test.ts; a cluster:
 * test/engine-cluster-faults.test.ts). Each takes the Redis to run on and a
 * way to register its cleanup steps, and makes its own assertions.
 */
import { sql } from 'kysely';
import { expect } from 'vitest';
import { Consumer } from '../../src/consumer/consumer.js';
import type { Job } from '../../src/consumer/types.js';
import type { Ledger } from '../../src/ledger/ledger.js';
import { Producer } from '../../src/producer/producer.js';
import { WakeChannel } from '../../src/wake/wake-channel.js';
import { createEffectsTable, effectHandler, readEffects, type EffectsDB, type StepPayload } from './effects.js';
import { uniqueQueue, type TestWake } from './engine.js';
import { waitFor, type TestLedger } from './ledger.js';
import { itemCount } from './items.js';
import { ChildConsumer } from './processes.js';
import { exactCounts } from './counts.js';

export interface ScenarioContext {
  tl: TestLedger;
  /** Registers a step the test's cleanup runs (in reverse order of registering). */
  cleanup: (step: () => Promise<unknown>) => void;
}

/** A Redis the scenario may take down (every node of it) and bring back empty on the same address. */
export interface StoppableRedis {
  url: string;
  kill: () => Promise<void>;
  /** Resolves once the server (every node, the cluster healthy) answers again. */
  start: () => Promise<void>;
}

/** Items `owner` holds; with `startedWithinMs`, only those whose run began that recently (ledger clock). */
async function idsHeldBy(ledger: Ledger, queue: string, owner: string, startedWithinMs?: number): Promise<string[]> {
  const recent =
    startedWithinMs === undefined
      ? sql``
      : sql`AND started_at > NOW(6) - INTERVAL ${startedWithinMs * 1000} MICROSECOND`;
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

/**
 * A consumer process killed with SIGKILL mid-handler: its items are reclaimed
 * after the lease and completed by the survivor, each once, the expired
 * attempt on record. `tw` is the survivor's and the producer's Redis.
 */
export async function consumerKilledMidHandler(
  ctx: ScenarioContext & { tw: TestWake; redisUrl: string },
): Promise<void> {
  const { tl, tw } = ctx;
  const { ledger } = tl;
  await createEffectsTable(ledger);
  const queue = uniqueQueue('kill');
  const ITEMS = 80;
  const LEASE_MS = 1200;

  const child = new ChildConsumer({
    dbUrl: tl.url,
    redisUrl: ctx.redisUrl,
    keyPrefix: tw.keyPrefix,
    queue,
    name: `${queue}-doomed`,
    concurrency: 4,
    leaseMs: LEASE_MS,
    workMs: 250,
  });
  ctx.cleanup(() => child.kill());
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
  ctx.cleanup(() => survivor.stop({ drainTimeoutMs: 1000 }));
  await child.waitReady();

  // A producer elsewhere: its wake-ups go through the stream, not straight to a consumer.
  const producer = new Producer({ ledger, wake: tw.remote() });
  const results = await producer.enqueueMany(lanedInputs(queue, ITEMS, 16));

  // Kill the child without warning while it holds an item it claimed at most 100 ms ago: that
  // item's 250 ms of work cannot have finished, so the kill always strands work. The survivor
  // starts after the kill: started before, on a loaded machine it could drain every item
  // before the child's first claim, and there would be nothing to strand.
  await waitFor(
    async () => (await idsHeldBy(ledger, queue, child.name, 100)).length > 0,
    30_000,
    'the child to be mid-work',
  );
  const exit = await child.kill();
  expect(exit.signal).toBe('SIGKILL');
  const stranded = await idsHeldBy(ledger, queue, child.name);
  expect(stranded.length, 'items the killed child still held').toBeGreaterThan(0);
  await survivor.start();

  await waitFor(
    async () => (await itemCount(ledger, queue, 'completed')) === ITEMS || undefined,
    45_000,
    'every item completed',
  );

  const effects = await readEffects(ledger);
  expect(effects).toHaveLength(ITEMS);
  expect(new Set(effects.map((e) => e.itemId))).toEqual(new Set(results.map((r) => r.id)));
  const [stats] = await ledger.stats(queue);
  expect(stats?.counts.completed.count).toBe(ITEMS);
  expect(stats?.counts.processing.count).toBe(0);
  expect(stats?.counts.dead.count).toBe(0);

  let reclaimed = 0;
  for (const id of stranded) {
    const r = await ledger.inspect(id);
    expect(r?.item.state).toBe('completed');
    // A completion the child had sent before it died may land after its death (a slow server runs what it
    // received, under the lease the child still held): that item ended with the child, once.
    if (effects.find((e) => e.itemId === id)?.worker === child.name) {
      expect(r?.item.leaseOwner).toBe(child.name);
      continue;
    }
    // The expired attempt is on record, counted, and the item ended with the survivor.
    expect(r?.attempts.map((a) => [a.outcome, a.worker])).toContainEqual(['lease_expired', child.name]);
    expect(r?.item.attempt).toBeGreaterThanOrEqual(2);
    expect(r?.item.leaseOwner).toBe(survivorName);
    expect(effects.find((e) => e.itemId === id)?.worker).toBe(survivorName);
    reclaimed++;
  }
  // The item the child claimed within 100 ms of the kill was 250 ms from done: at least that one was reclaimed.
  expect(reclaimed, 'stranded items reclaimed from the killed child').toBeGreaterThan(0);
  expect(survivor.counters.completed).toBe(effects.filter((e) => e.worker === survivorName).length);
  expect(survivor.counters.retried).toBe(0);
  expect(survivor.counters.leaseLost).toBe(0);
}

/**
 * Redis taken down mid-run: enqueues still commit (their wake-ups counted as
 * failed), the sweep completes the work, and wake-ups resume once Redis is
 * back, empty (its streams and groups gone).
 */
export async function redisStoppedMidRun(
  ctx: ScenarioContext & { redis: StoppableRedis; keyPrefix: string },
): Promise<void> {
  const { ledger } = ctx.tl;
  const { redis, keyPrefix } = ctx;
  const queue = uniqueQueue('redis-down');
  // The producer and the consumer each have a channel of their own.
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
  ctx.cleanup(() => conWake.close());
  ctx.cleanup(() => pubWake.close());
  ctx.cleanup(() => consumer.stop({ drainTimeoutMs: 1000 }));
  await consumer.start();
  const producer = new Producer({ ledger, wake: pubWake });
  const completed = () => itemCount(ledger, queue, 'completed');

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

  // Phase 3: Redis back on the same address (empty: the streams and the group are gone). Wake-ups resume.
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
  expect(exactCounts(stats)).toMatchObject({ completed: 60, pending: 0, processing: 0, dead: 0 });
  expect(new Set(done).size).toBe(60);
  expect(done).toHaveLength(60);
}
