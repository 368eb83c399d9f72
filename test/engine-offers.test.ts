import { Redis } from 'ioredis';
import { expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { OFFER_TTL_MS, offerRoom } from '../src/consumer/offer-desk.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { offersKey } from '../src/wake/keys.js';
import { MAX_HANDOFF_BYTES } from '../src/wake/offers.js';
import type { Offer } from '../src/wake/messages.js';
import { uniqueQueue } from './support/engine.js';
import { waitFor } from './support/ledger.js';
import { testScope } from './support/scope.js';
import { redisUrl } from './support/services.js';

// Offers (docs/design/handover.md, "Through an offer"): a warm consumer with free slots stands an offer in Redis; a
// producer in another process (here: on a channel of its own) inserts its item claimed under it.
const scope = testScope();

const silent = createLogger('test', 'silent');

function redis(): Redis {
  const r = new Redis(redisUrl());
  scope.cleanup(async () => r.disconnect());
  return r;
}

/** How many items the consumer's claim rounds win from now on (a round may run at any time: a sweep, a room change). */
function claimsByRounds(consumer: Consumer): () => number {
  let won = 0;
  consumer.on('claimRound', (r) => (won += r.claimed));
  return () => won;
}

/** A running consumer of its own queue, warmed by one item so that it stands an offer; and a producer elsewhere. */
async function warmConsumer(opts: { leaseMs?: number; concurrency?: number } = {}) {
  const tl = await scope.ledger();
  const tw = scope.wake();
  const queue = uniqueQueue('offers');
  const ran: { id: string; attempt: number }[] = [];
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: opts.concurrency ?? 4,
    pollIntervalMs: 60_000,
    leaseMs: opts.leaseMs ?? 30_000,
    logger: silent,
    handlers: {
      t: async (job: { id: string; attempt: number }) => void ran.push({ id: job.id, attempt: job.attempt }),
    },
  });
  await consumer.start();
  scope.cleanup(() => consumer.stop({ drainTimeoutMs: 1000 }));
  const producerWake = tw.remote();
  const producer = new Producer({ ledger: tl.ledger, wake: producerWake });
  await producer.enqueue({ queue, type: 't', payload: { warm: true } });
  await waitFor(() => consumer.counters.completed === 1 || undefined, 10_000, 'the warming item');
  await waitFor(() => consumer.counters.offersMade >= 1 || undefined, 10_000, 'an offer');
  return { tl, tw, queue, ran, consumer, producer, producerWake };
}

test(
  'an item from a producer elsewhere is inserted claimed under the ' +
    "idle consumer's offer and handed over: no claim, no wake-up",
  async () => {
    const { tl, queue, ran, consumer, producer, producerWake } = await warmConsumer();
    const before = { ...consumer.counters };
    const publishedBefore = producerWake.counters.published;
    const wonByRounds = claimsByRounds(consumer);

    const { id } = await producer.enqueue({ queue, type: 't', payload: { n: 1 } });
    await waitFor(() => ran.some((r) => r.id === id) || undefined, 10_000, 'the item to run');
    await waitFor(() => consumer.counters.completed === 2 || undefined, 10_000, 'the item completed');

    expect(consumer.counters.handedOver - before.handedOver).toBe(1);
    // It was never claimed by the consumer, and no wake-up went out for it.
    expect(wonByRounds()).toBe(0);
    expect(consumer.counters.wakeEntriesRead).toBe(before.wakeEntriesRead);
    expect(producerWake.counters.published).toBe(publishedBefore);
    const r = await tl.ledger.inspect(id);
    expect(r?.item).toMatchObject({ state: 'completed', attempt: 1, leaseOwner: consumer.name });
    expect(ran.find((x) => x.id === id)?.attempt).toBe(1);
  },
);

test(
  'a batch from a producer elsewhere is handed over under one ' +
    'offer, as many of its items as the offer holds slots for',
  async () => {
    const { tl, tw, queue, ran, consumer, producer } = await warmConsumer({ concurrency: 16 });
    const r = redis();
    // The oldest standing offer, the one a producer pops first; made with all sixteen slots free.
    const standing = await waitFor(
      async () => (await r.lindex(offersKey(tw.keyPrefix, queue), 0)) ?? undefined,
      10_000,
      'a standing offer',
    );
    const offer = JSON.parse(standing) as Offer;
    expect(offer.room).toBe(offerRoom(16));
    expect(offer.room).toBeGreaterThan(1);
    const before = consumer.counters.handedOver;
    const wonByRounds = claimsByRounds(consumer);
    const results = await producer.enqueueMany(
      Array.from({ length: offer.room! + 1 }, (_, k) => ({ queue, type: 't', payload: { k } })),
    );
    const ids = results.map((x) => x.id);
    await waitFor(() => ids.every((id) => ran.some((x) => x.id === id)) || undefined, 10_000, 'the batch to run');
    expect(consumer.counters.handedOver - before).toBe(offer.room);
    // The one the offer had no room for went the usual way: a wake-up and a claim round.
    expect(wonByRounds()).toBe(1);
    const inspected = await Promise.all(ids.map((id) => tl.ledger.get(id)));
    expect(inspected.filter((it) => it?.leaseToken === offer.token).map((it) => it?.id)).toEqual(
      ids.slice(0, offer.room),
    );
  },
);

test('an item too large to broadcast is handed over by count, and the consumer reads it from the ledger', async () => {
  const { queue, ran, consumer, producer, producerWake } = await warmConsumer();
  const before = { ...consumer.counters };
  const publishedBefore = producerWake.counters.published;
  const big = 'x'.repeat(MAX_HANDOFF_BYTES + 1);
  const wonByRounds = claimsByRounds(consumer);

  const { id } = await producer.enqueue({ queue, type: 't', payload: { big } });
  await waitFor(() => ran.some((r) => r.id === id) || undefined, 10_000, 'the large item to run');
  expect(consumer.counters.handedOver - before.handedOver).toBe(1);
  expect(wonByRounds()).toBe(0);
  expect(producerWake.counters.published).toBe(publishedBefore);
});

test(
  'a handoff lost after the commit: the consumer finds the item by the ' +
    "offer's token in the ledger and runs it once, long before its lease ends",
  async () => {
    const { tl, queue, ran, consumer, producerWake } = await warmConsumer({ leaseMs: 60_000 });
    // A producer that took the offer, committed its item claimed under it, and died before the handoff.
    const taken = await waitFor(() => producerWake.offers.take(queue), 10_000, 'a standing offer');
    expect(taken.offer.owner).toBe(consumer.name);
    const out = await tl.ledger.enqueueClaiming([{ queue, type: 't', payload: { orphan: true } }], () => taken.lease);
    expect(out.claimed).toHaveLength(1);
    const id = out.results[0]!.id;

    await waitFor(() => ran.some((r) => r.id === id) || undefined, 20_000, 'the orphan to run');
    await waitFor(
      async () => (await tl.ledger.get(id))?.state === 'completed' || undefined,
      10_000,
      'the orphan completed',
    );
    expect(consumer.counters.handoffsRecovered).toBe(1);
    expect(ran.filter((r) => r.id === id)).toEqual([{ id, attempt: 1 }]);
    const r = await tl.ledger.inspect(id);
    expect(r?.item.attempt).toBe(1);
    expect(r?.attempts.map((a) => a.outcome)).not.toContain('lease_expired');
  },
);

test('an offer a producer cannot use (no handler for the type) goes back; the item is enqueued pending', async () => {
  const { tl, tw, queue, consumer, producer, producerWake } = await warmConsumer();
  const r = redis();
  const key = offersKey(tw.keyPrefix, queue);
  const standing = await waitFor(
    async () => ((await r.llen(key)) === 1 ? await r.lindex(key, 0) : undefined) ?? undefined,
    10_000,
    'one standing offer',
  );
  const offer = JSON.parse(standing) as Offer;
  const handedBefore = consumer.counters.handedOver;
  // The list holds one offer before and after: what shows the offer went back is the producer's
  // own give-back, seen done.
  const offers = producerWake.offers;
  const take = offers.take.bind(offers);
  const givenBack: string[] = [];
  offers.take = async (q) => {
    const taken = await take(q);
    return taken && { ...taken, giveBack: async () => void (await taken.giveBack(), givenBack.push(q)) };
  };

  const { id } = await producer.enqueue({ queue, type: 'no-such-handler', payload: {} });
  // Inserted pending, not under the offer. Its wake-up may already have had the consumer claim it in a round
  // (to release it: no handler here), so what is checked is that no lease of the offer's is on it.
  const item = await tl.ledger.get(id);
  expect(item).toBeDefined();
  expect(item?.leaseToken).not.toBe(offer.token);
  await waitFor(() => givenBack.length === 1 || undefined, 5_000, 'the offer given back');
  expect(givenBack).toEqual([queue]);
  expect(consumer.counters.handedOver).toBe(handedBefore);
});

test(
  'an expired offer (its consumer gone) is skipped and dropped: ' +
    'the item goes to a live consumer, not to the dead one',
  async () => {
    const { tl, tw, queue, ran, consumer, producer } = await warmConsumer();
    const r = redis();
    const key = offersKey(tw.keyPrefix, queue);
    const now = Date.now();
    const dead: Offer = {
      owner: 'dead-consumer',
      token: 'dead-token-000000000000',
      leaseMs: 30_000,
      classes: ['default'],
      types: ['t'],
      expiresAtMs: now - 1,
      madeAtMs: now - OFFER_TTL_MS,
    };
    await r.lpush(key, JSON.stringify(dead));

    const { id } = await producer.enqueue({ queue, type: 't', payload: {} });
    await waitFor(() => ran.some((x) => x.id === id) || undefined, 10_000, 'the item to run');
    const item = await waitFor(
      async () => {
        const it = await tl.ledger.get(id);
        return it?.state === 'completed' ? it : undefined;
      },
      10_000,
      'the item completed',
    );
    expect(item.leaseOwner).toBe(consumer.name);
    expect(await r.lrange(key, 0, -1)).not.toContain(JSON.stringify(dead));
  },
);

test('a consumer with many free slots stands four offers, so some are there while others are taken', async () => {
  const { tw, queue } = await warmConsumer({ concurrency: 16 });
  const r = redis();
  const key = offersKey(tw.keyPrefix, queue);
  const all = await waitFor(
    async () => ((await r.llen(key)) === 4 ? await r.lrange(key, 0, -1) : undefined),
    10_000,
    'four standing offers',
  );
  const offers = all.map((w) => JSON.parse(w) as Offer);
  expect(new Set(offers.map((o) => o.token)).size).toBe(4);
  // Together they hold under half the slots: the rest stay for claim rounds.
  expect(offers.reduce((n, o) => n + (o.room ?? 1), 0)).toBeLessThanOrEqual(8);
});

test('a stopping consumer withdraws its offer', async () => {
  const { tw, queue, consumer } = await warmConsumer();
  const r = redis();
  const key = offersKey(tw.keyPrefix, queue);
  await waitFor(async () => (await r.llen(key)) === 1 || undefined, 10_000, 'one standing offer');
  await consumer.stop({ drainTimeoutMs: 1000 });
  expect(await r.llen(key)).toBe(0);
});
