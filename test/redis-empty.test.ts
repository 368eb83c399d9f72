// Nothing lives only in Redis (docs/design/wake.md, "What Redis holds, and what its loss costs"): a Redis
// restarted empty mid-run, while items wait on their BullMQ timers and producers take a consumer's offers
// and hand their items over, costs latency only. Every item runs once, and no attempt is spent.
import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { offersKey } from '../src/wake/keys.js';
import type { Offer } from '../src/wake/messages.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { deleteKeys, uniqueQueue } from './support/engine.js';
import { historyCount, itemCount } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { PrivateRedis } from './support/processes.js';

interface FxDB {
  fx: { item_id: string };
}

let tl: TestLedger | undefined;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  await tl?.drop();
  tl = undefined;
});

test('Redis restarted empty with timers pending and offers taken: every item runs once, no attempt spent', async () => {
  tl = await createTestLedger();
  const { ledger } = tl;
  await sql`CREATE TABLE fx (item_id VARCHAR(32) NOT NULL PRIMARY KEY) ENGINE=InnoDB`.execute(ledger.db);
  const redis = await PrivateRedis.start();
  const keyPrefix = `lwt:${randomBytes(4).toString('hex')}:`;
  cleanups.push(
    () => redis.destroy(),
    () => deleteKeys(redis.url, keyPrefix),
  );
  const queue = uniqueQueue('redis-empty');
  const logger = createLogger('test', 'silent');
  // The producer has a channel of its own, as one in another process has: its items reach the consumer through Redis.
  const conWake = new WakeChannel({ redis: redis.url, keyPrefix, logger });
  const pubWake = new WakeChannel({ redis: redis.url, keyPrefix, logger });
  cleanups.push(
    () => conWake.close(),
    () => pubWake.close(),
  );
  const runs = new Map<string, number>();
  const consumer = new Consumer<FxDB>({
    ledger,
    wake: conWake,
    queue,
    concurrency: 8,
    // While Redis is up, a sweep every 2 s is the backstop for the timers Redis lost.
    pollIntervalMs: 2_000,
    redisDownPollMs: 200,
    readBlockMs: 200,
    logger,
    handlers: {
      t: async (job, ctx) => {
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        // One committed run per item: a second would fail on the primary key.
        await ctx.transaction(async (trx) => {
          await trx.insertInto('fx').values({ item_id: job.id }).execute();
        });
      },
    },
  });
  await consumer.start();
  cleanups.push(() => consumer.stop({ drainTimeoutMs: 1000 }));
  const producer = new Producer({ ledger, wake: pubWake });
  const ids: string[] = [];
  const enqueue = async (payload: Record<string, unknown>, delayMs?: number): Promise<void> => {
    const r = await producer.enqueue({ queue, type: 't', payload, ...(delayMs !== undefined ? { delayMs } : {}) });
    ids.push(r.id);
  };

  // Warm: the consumer stands offers, and a producer's items go by them.
  await waitFor(() => pubWake.connected() || undefined, 10_000, 'the producer connected');
  await enqueue({ warm: true });
  await waitFor(() => consumer.counters.offersMade > 0 || undefined, 10_000, 'a standing offer');
  for (let n = 0; n < 5 && consumer.counters.handedOver === 0; n++) {
    await enqueue({ byOffer: n });
    await waitFor(() => consumer.counters.completed === ids.length || undefined, 10_000, 'the item by offer');
  }
  expect(consumer.counters.handedOver).toBeGreaterThan(0);

  // Items due after Redis is back, whose only wake-up is a BullMQ timer in the Redis about to be lost.
  for (let n = 0; n < 10; n++) await enqueue({ delayed: n }, 3_000);
  const delayed = ids.slice(-10);
  const timerOf = async (): Promise<boolean[]> => {
    const keys = await pubWake.redis.keys(`${keyPrefix}lanewake-timers:*`);
    return delayed.map((id) => keys.some((k) => k.includes(id)));
  };
  expect(await timerOf()).toEqual(delayed.map(() => true));

  // An offer taken as a producer takes one, its item inserted claimed under it, and Redis lost before the
  // handoff: the consumer must find the item in the ledger by the offer's token.
  const posted = await waitFor(
    async () => (await pubWake.redis.lpop(offersKey(keyPrefix, queue))) ?? undefined,
    10_000,
    'a standing offer to take',
  );
  const offer = JSON.parse(posted) as Offer;
  const taken = await ledger.enqueueClaiming([{ queue, type: 't', payload: { underOffer: true } }], () => ({
    owner: offer.owner,
    token: offer.token,
    leaseMs: offer.leaseMs,
    max: 1,
  }));
  expect(taken.claimed.map((c) => c.id)).toEqual([taken.results[0]!.id]);
  ids.push(taken.results[0]!.id);

  // Items enqueued one by one while Redis dies and comes back empty (offers taken just before it dies
  // lose their handoffs too).
  for (let n = 0; n < 30; n++) {
    if (n === 10) await redis.kill();
    if (n === 20) await redis.start();
    await enqueue({ around: n });
  }
  await waitFor(() => pubWake.connected() || undefined, 10_000, 'the producer back on Redis');
  // The new Redis holds none of the timers.
  expect(await timerOf()).toEqual(delayed.map(() => false));

  await waitFor(
    async () => ((await itemCount(ledger, queue, 'completed')) === ids.length ? true : undefined),
    30_000,
    'every item completed',
  );
  await waitFor(() => consumer.redisConnected || undefined, 10_000, 'the consumer back on Redis');
  // Offers stand again in the new Redis and carry items.
  const offersAfter = consumer.counters.offersMade;
  await waitFor(() => consumer.counters.offersMade > offersAfter || undefined, 15_000, 'an offer in the new Redis');

  expect(consumer.counters.handoffsRecovered).toBeGreaterThanOrEqual(1);
  const [stats] = await ledger.stats(queue);
  expect(stats?.counts).toMatchObject({
    completed: { count: ids.length, atLeast: false },
    pending: { count: 0 },
    processing: { count: 0 },
    dead: { count: 0 },
  });
  expect([...runs.keys()].sort()).toEqual([...ids].sort());
  expect([...runs.values()].every((n) => n === 1)).toBe(true);
  const fx = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM fx`.execute(ledger.db);
  expect(Number(fx.rows[0]?.n)).toBe(ids.length);
  // No attempt spent: every item completed on its first attempt, with no history of another.
  const attempts = await sql<{
    attempt: number;
  }>`SELECT attempt FROM ${ledger.tables.items} WHERE queue = ${queue}`.execute(ledger.db);
  expect(attempts.rows.map((r) => Number(r.attempt))).toEqual(ids.map(() => 1));
  expect(await historyCount(ledger)).toBe(0);
}, 300_000);
