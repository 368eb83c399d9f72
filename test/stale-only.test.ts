// Stale-only claims (docs/design/consumer.md, "Stale-only claims"): only rescued work, by the queue's flag,
// a consumer's option, or its gate on the ledger.
import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import { consumerHarness } from './support/consumer-harness.js';
import { claimOne, expireAndReclaim, mustGet } from './support/items.js';
import { testTxnMode, waitFor } from './support/ledger.js';
import { lanewake } from './support/cli.js';

const harness = consumerHarness('stale');

/** An item claimed by a holder that then died: its lease expires and a sweep takes it back. */
async function abandoned(ledger: Ledger, queue: string, leaseMs = 300): Promise<string> {
  const { id } = await ledger.enqueue({ queue, type: 't', payload: { rescued: true } });
  const held = await claimOne(ledger, queue, 'dead-holder', leaseMs);
  expect(held.id).toBe(id);
  return id;
}

describe('stale-only claims', () => {
  test(
    'the ledger: a stale-only claim takes rescued items only, by search ' +
      'or by id; explain says stale_only; off, pending work is claimed',
    async () => {
      const { tl, queue } = await harness.setUp();
      const ledger = tl.ledger;
      const rescued = await abandoned(ledger, queue);
      await expireAndReclaim(ledger, queue, [rescued]);
      const fresh = await ledger.enqueue({ queue, type: 't', payload: {} });

      const cli = await lanewake(['--database-url', tl.url, 'stale-only', queue, 'on', '--json']);
      expect(cli.code, cli.err).toBe(0);
      expect(JSON.parse(cli.out)).toEqual({ queue, staleOnly: true });
      expect(await ledger.staleOnlyQueues([queue])).toEqual(new Set([queue]));
      expect((await ledger.sweepSignals([queue]))[0]).toMatchObject({ staleOnly: true, claimable: true });
      expect((await ledger.explain(fresh.id))?.code).toBe('stale_only');

      expect(await ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids: [fresh.id], staleOnly: true })).toEqual(
        [],
      );
      const taken = await ledger.claim({ queue, owner: 'w', leaseMs: 60_000, limit: 10, staleOnly: true });
      expect(taken.items.map((i) => i.id)).toEqual([rescued]);
      expect((await ledger.claim({ queue, owner: 'w', leaseMs: 60_000, limit: 10, staleOnly: true })).items).toEqual(
        [],
      );
      expect(await mustGet(ledger, fresh.id)).toMatchObject({ state: 'pending' });

      const off = await lanewake(['--database-url', tl.url, 'stale-only', queue, 'off']);
      expect(off.out).toContain('claims pending work as usual');
      expect((await ledger.explain(fresh.id))?.code).not.toBe('stale_only');
      expect((await ledger.claim({ queue, owner: 'w', leaseMs: 60_000, limit: 10 })).items.map((i) => i.id)).toEqual([
        fresh.id,
      ]);
      expect((await lanewake(['--database-url', tl.url, 'stale-only', queue, 'maybe'])).code).toBe(2);
    },
  );

  test("a stale-only queue's consumer rescues expired work and leaves pending work until the flag is off", async () => {
    const { tl, queue, producer } = await harness.setUp();
    const ledger = tl.ledger;
    await ledger.setStaleOnly(queue, true);
    const rescued = await abandoned(ledger, queue);
    const waiting = await producer.enqueue({ queue, type: 't', payload: {} });
    const done: string[] = [];
    const consumer = await harness.consumer({ t: async (job) => void done.push(job.id) }, { name: 'c', leaseMs: 5000 });
    expect(consumer.staleOnly).toBe('queue');

    await waitFor(() => done.includes(rescued) || undefined, 20_000, 'the rescued item ran');
    expect(await mustGet(ledger, waiting.id)).toMatchObject({ state: 'pending' });
    expect(done).toEqual([rescued]);
    expect(consumer.counters.staleOnlyRounds).toBeGreaterThan(0);

    await ledger.setStaleOnly(queue, false);
    await waitFor(() => done.includes(waiting.id) || undefined, 20_000, 'the pending item ran once the flag was off');
    expect(consumer.staleOnly).toBeUndefined();
  });

  test("a consumer's own staleOnly option holds it to rescued work", async () => {
    const { tl, queue, producer } = await harness.setUp();
    const rescued = await abandoned(tl.ledger, queue);
    const waiting = await producer.enqueue({ queue, type: 't', payload: {} });
    const done: string[] = [];
    const consumer = await harness.consumer(
      { t: async (job) => void done.push(job.id) },
      { name: 'rescuer', staleOnly: true },
    );
    expect(consumer.staleOnly).toBe('consumer');
    await waitFor(() => done.includes(rescued) || undefined, 20_000, 'the rescued item ran');
    expect(await mustGet(tl.ledger, waiting.id)).toMatchObject({ state: 'pending' });
    expect(done).toEqual([rescued]);
  });

  test("the gate trips while the ledger's pool is saturated, and clears after", async () => {
    const { tl, tw, queue, producer } = await harness.setUp();
    // A ledger of its own with a tiny pool, for the consumer: the test saturates it.
    const small = new Ledger({ url: tl.url, poolSize: 2, ...testTxnMode() });
    harness.cleanup(() => small.close());
    const done: string[] = [];
    const consumer = new Consumer({
      ledger: small,
      wake: tw.wake,
      queue,
      name: 'gated',
      pollIntervalMs: 200,
      staleOnlyGate: { poolWaiting: 1 },
      handlers: { t: async (job) => void done.push(job.id) },
    });
    harness.cleanup(() => consumer.stop({ drainTimeoutMs: 1000 }));
    await consumer.start();
    // Its start (registration, the first claim round, the schedule firer) may fill two connections for a moment.
    await waitFor(() => consumer.staleOnly === undefined || undefined, 10_000, 'the gate clear once started');

    // Both connections busy and one more request queued behind them.
    const held = Promise.all([1, 2, 3].map(() => sql`SELECT SLEEP(2)`.execute(small.db)));
    await waitFor(() => consumer.staleOnly === 'pool' || undefined, 10_000, 'the gate tripped');
    const rounds = consumer.counters.staleOnlyRounds;
    const item = await producer.enqueue({ queue, type: 't', payload: {} });
    // The round its wake-up starts is asked while the pool is saturated: stale-only.
    await waitFor(() => consumer.counters.staleOnlyRounds > rounds || undefined, 10_000, 'a stale-only round');
    await held;
    await waitFor(() => consumer.staleOnly === undefined || undefined, 10_000, 'the gate cleared');
    await waitFor(() => done.includes(item.id) || undefined, 20_000, 'the pending item ran once the gate cleared');
  });
});
