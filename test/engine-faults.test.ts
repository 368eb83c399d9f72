import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { Redis } from 'ioredis';
import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import type { Outcome } from '../src/consumer/job-run.js';
import type { Job, JobContext } from '../src/consumer/types.js';
import { LeaseLostError } from '../src/errors.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { Producer } from '../src/producer/producer.js';
import { wakeStreamKey } from '../src/wake/keys.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import {
  createEffectsTable,
  effectCount,
  insertEffect,
  nowUs,
  type EffectsDB,
  type StepPayload,
} from './support/effects.js';
import { consumerKilledMidHandler, redisStoppedMidRun } from './support/fault-scenarios.js';
import { createTestWake, deleteKeys, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { PrivateRedis } from './support/processes.js';
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

const cleanup = (step: () => Promise<unknown>): void => {
  cleanups.push(step);
};

test(
  'a consumer process killed with SIGKILL mid-handler: its items are ' +
    'reclaimed after the lease and completed by the others, once',
  async () => {
    tl = await createTestLedger();
    tw = createTestWake();
    await consumerKilledMidHandler({ tl, tw, redisUrl: redisUrl(), cleanup });
  },
);

test('Redis stopped mid-run: enqueue still commits, work ' +
  'completes by sweeping, wake-ups resume when Redis returns', async () => {
  tl = await createTestLedger();
  const redis = await PrivateRedis.start();
  const keyPrefix = `lwt:${randomBytes(4).toString('hex')}:`;
  cleanup(() => redis.destroy());
  cleanup(() => deleteKeys(redis.url, keyPrefix));
  await redisStoppedMidRun({ tl, redis, keyPrefix, cleanup });
}, 90_000);

test('closing a consumer and its wake channel while Redis is down does not hang', async () => {
  tl = await createTestLedger();
  const queue = uniqueQueue('close-down');
  const redis = await PrivateRedis.start();
  const wake = new WakeChannel({ redis: redis.url, keyPrefix: `lwt:${queue}:` });
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake,
    queue,
    redisDownPollMs: 200,
    readBlockMs: 200,
    handlers: { step: async () => undefined },
  });
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
  const outcome = await Promise.race([
    closed,
    new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still closing after 15 s'), 15_000))),
  ]);
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
      await sql`INSERT INTO effects (item_id, worker, started_at_us, ended_at_us)
        VALUES (${e.id}, 'producer', 0, 0)`.execute(tx.trx);
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
    await sql`INSERT INTO effects (item_id, worker, started_at_us, ended_at_us)
      VALUES (${e.id}, 'producer', 0, 0)`.execute(tx.trx);
    return e;
  });
  expect((await ledger.get(committed.id))?.state).toBe('pending');
  expect(await effectCount(ledger)).toBe(1);
  expect(await r.xlen(streamKey)).toBe(1);
  expect(tw.wake.counters.published).toBe(1);
});

test(
  'a handler whose lease was stolen cannot complete: ' +
    'ctx.transaction throws LeaseLostError and its writes roll back',
  async () => {
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
  },
);
