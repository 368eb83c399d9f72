import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { wakeStreamKey } from '../src/wake/keys.js';
import { consumerHarness, type ConsumerSetup } from './support/consumer-harness.js';
import { createEffectsTable, readEffects } from './support/effects.js';
import { uniqueQueue } from './support/engine.js';
import { history, mustGet } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { FOLLOW_UPS, OUTBOX_STOPS, outboxHandler } from './support/outbox-handler.js';
import { ChildConsumer } from './support/processes.js';
import { redisUrl } from './support/services.js';

// The transactional outbox (docs/design/handlers.md, "Follow-up work: the outbox"): ctx.enqueue inside
// ctx.transaction commits the follow-up items with the handler's writes and the completion, and
// announces them after the commit.

const harness = consumerHarness('outbox');

async function setUp(): Promise<ConsumerSetup & { followQueue: string }> {
  const setup = await harness.setUp();
  await createEffectsTable(setup.tl.ledger);
  return { ...setup, followQueue: uniqueQueue('follow') };
}

/** The follow-up items of `parent` in the ledger. */
async function followUpsOf(
  setup: ConsumerSetup & { followQueue: string },
  parent: string,
): Promise<{ id: string; n: number }[]> {
  const { ledger } = setup.tl;
  const r = await sql<{
    id: string;
    payload: string;
  }>`SELECT id, payload FROM ${ledger.tables.items} WHERE queue = ${setup.followQueue}`.execute(ledger.db);
  return r.rows
    .map((row) => ({ id: row.id, p: JSON.parse(row.payload) as { parent: string; n: number } }))
    .filter((x) => x.p.parent === parent)
    .map((x) => ({ id: x.id, n: x.p.n }));
}

/** The ids the wake stream of the follow-up queue has announced. */
async function announced(setup: ConsumerSetup & { followQueue: string }): Promise<string[]> {
  const entries = (await setup.tw.wake.redis.xrange(
    wakeStreamKey(setup.tw.keyPrefix, setup.followQueue, 'default'),
    '-',
    '+',
  )) as [string, string[]][];
  return entries.flatMap(([, f]) => (f[f.indexOf('i') + 1] ?? '').split(',').filter((id) => id !== ''));
}

describe('ctx.enqueue: the transactional outbox', () => {
  test('follow-ups commit with the effect and the completion, and are announced after the commit', async () => {
    const setup = await setUp();
    const { tl, queue, producer } = setup;
    const { id } = await producer.enqueue({ queue, type: 'parent', payload: {} });
    let seenAtCommit: number | undefined;
    await harness.consumer({
      parent: async (job, ctx) => {
        const value = await outboxHandler('local', setup.followQueue, undefined, () => undefined)(job, ctx as never);
        // ctx.transaction has returned: committed, and the wake-ups published.
        seenAtCommit = (await announced(setup)).length;
        return value;
      },
    });
    const done = await waitFor(
      async () => {
        const item = await mustGet(tl.ledger, id);
        return item.state === 'completed' ? item : undefined;
      },
      30_000,
      'parent completed',
    );
    const follow = await followUpsOf(setup, id);
    expect(follow.map((f) => f.n).sort()).toEqual([0, 1]);
    expect(done.result).toEqual({
      followUps: follow
        .map((f) => f.id)
        .sort((a, b) => follow.find((x) => x.id === a)!.n - follow.find((x) => x.id === b)!.n),
    });
    expect(await waitFor(async () => (seenAtCommit !== undefined ? true : undefined), 10_000, 'handler returned')).toBe(
      true,
    );
    expect(seenAtCommit).toBe(FOLLOW_UPS);
    expect((await announced(setup)).sort()).toEqual(follow.map((f) => f.id).sort());
    expect((await readEffects(tl.ledger)).map((e) => e.itemId)).toEqual([id]);
  });

  test('ctx.enqueue outside ctx.transaction throws and enqueues nothing', async () => {
    const setup = await setUp();
    const { tl, queue, producer } = setup;
    const { id } = await producer.enqueue({ queue, type: 'parent', payload: {}, maxAttempts: 1 });
    await harness.consumer({
      parent: async (_job, ctx) => ctx.enqueue({ queue: setup.followQueue, type: 'follow', payload: {} }),
    });
    const dead = await waitFor(
      async () => {
        const item = await mustGet(tl.ledger, id);
        return item.state === 'dead' ? item : undefined;
      },
      30_000,
      'parent dead',
    );
    expect(dead.lastError).toMatch(/ctx.enqueue runs only inside ctx.transaction/);
    expect(await followUpsOf(setup, id)).toEqual([]);
  });

  for (const stop of OUTBOX_STOPS) {
    test(`a worker SIGKILLed ${stop}: follow-ups exist once when the parent completed, never before`, async () => {
      const setup = await setUp();
      const { tl, tw, queue, producer, followQueue } = setup;
      const { id } = await producer.enqueue({ queue, type: 'parent', payload: {} });
      const child = new ChildConsumer({
        dbUrl: tl.url,
        redisUrl: redisUrl(),
        keyPrefix: tw.keyPrefix,
        queue,
        name: 'child',
        mode: 'outbox',
        followQueue,
        outboxStop: stop,
        leaseMs: 1500,
        pollIntervalMs: 200,
      });
      harness.cleanup(() => child.kill());
      await child.waitReady();
      await waitFor(
        async () => (child.events.some((e) => e.event === 'at' && e.point === stop) ? true : undefined),
        30_000,
        `child at ${stop}`,
      );
      await child.kill();

      const parent = await mustGet(tl.ledger, id);
      const follow = await followUpsOf(setup, id);
      if (stop === 'after-commit') {
        // Committed: the parent, its effect and its follow-ups together; the wake-up never went out.
        expect(parent.state).toBe('completed');
        expect(follow).toHaveLength(FOLLOW_UPS);
        expect(await readEffects(tl.ledger)).toHaveLength(1);
        expect(await announced(setup)).toEqual([]);
      } else {
        // Killed before COMMIT: none of it is there, and nothing was announced.
        expect(parent.state).toBe('processing');
        expect(follow).toEqual([]);
        expect(await readEffects(tl.ledger)).toEqual([]);
        expect(await announced(setup)).toEqual([]);
      }

      // Another worker takes the dead holder's item once its lease expires, and completes it.
      await harness.consumer(
        { parent: outboxHandler('local', followQueue, undefined, () => undefined) as never },
        { name: 'local', leaseMs: 1500 },
      );
      const done = await waitFor(
        async () => {
          const item = await mustGet(tl.ledger, id);
          return item.state === 'completed' ? item : undefined;
        },
        30_000,
        'parent completed',
      );
      const after = await followUpsOf(setup, id);
      expect(after.map((f) => f.n).sort()).toEqual([0, 1]);
      if (follow.length > 0) expect(after).toEqual(follow); // the committed ones, not made again
      expect((await readEffects(tl.ledger)).map((e) => [e.itemId, e.worker])).toEqual([
        [id, stop === 'after-commit' ? 'child' : 'local'],
      ]);
      expect(done.attempt).toBe(stop === 'after-commit' ? 1 : 2);
      if (stop !== 'after-commit') {
        // The killed attempt expired and the next completed. (A claim slower than a third of the lease hands
        // its item back unstarted, a `released` row that spends no attempt: a loaded server may add one.)
        expect((await history(tl.ledger, id)).map((h) => h.outcome).filter((o) => o !== 'released')).toEqual([
          'lease_expired',
          'completed',
        ]);
        expect((await announced(setup)).sort()).toEqual(after.map((f) => f.id).sort());
      }
    });
  }
});
