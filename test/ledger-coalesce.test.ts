import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { ClaimInput, Ledger } from '../src/ledger/ledger.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { freshQueue, mustGet, only, withForeignToken } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// Coalesced groups at the ledger (docs/design/batches-and-steps.md, Coalescing).

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

const coalesce = (mode: 'latest' | 'all' | 'settled', max = 1000): NonNullable<ClaimInput['coalesce']> => ({
  types: { upd: { mode, max } },
  maxBytes: 1 << 20,
});

async function claimGroup(
  queue: string,
  mode: 'latest' | 'all' | 'settled' = 'latest',
  max = 1000,
  leaseMs = 60_000,
): Promise<ClaimedItem> {
  return only(
    (await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs, coalesce: coalesce(mode, max) })).items,
    'one head',
  );
}

async function states(ids: readonly string[]): Promise<string[]> {
  return Promise.all(ids.map(async (id) => (await mustGet(ledger, id)).state));
}

describe('coalesced groups', () => {
  test(
    'a head takes the next due pending items of its type, up to the first of ' +
      'another type; the group ends together and the lane goes on after it',
    async () => {
      const queue = freshQueue('co');
      const lane = 'entity:1';
      const upd = await ledger.enqueueMany([1, 2, 3].map((n) => ({ queue, type: 'upd', lane, payload: { n } })));
      const other = await ledger.enqueue({ queue, type: 'other', lane, payload: { n: 4 } });
      const later = await ledger.enqueue({ queue, type: 'upd', lane, payload: { n: 5 } });
      const head = await claimGroup(queue);
      expect(head.id).toBe(upd[0]!.id);
      expect(head.group).toMatchObject({ ids: [upd[1]!.id, upd[2]!.id], newest: { n: 3 } });
      expect(head.group?.payloads).toBeUndefined();
      expect(await states([...upd.map((u) => u.id), other.id, later.id])).toEqual([
        'processing',
        'processing',
        'processing',
        'pending',
        'pending',
      ]);
      expect((await mustGet(ledger, upd[2]!.id)).groupHead).toBe(head.id);

      expect(await ledger.complete(head, { done: true })).toMatchObject({ won: true });
      expect(await states(upd.map((u) => u.id))).toEqual(['completed', 'completed', 'completed']);
      // The lane is handed on after the group: the item of the other type is next, then the later update alone.
      const next = await claimGroup(queue);
      expect(next.id).toBe(other.id);
      expect(next.group).toBeUndefined();
      expect(await ledger.complete(next)).toMatchObject({ won: true });
      const last = await claimGroup(queue);
      expect(last).toMatchObject({ id: later.id });
      expect(last.group).toBeUndefined();
    },
  );

  test('a retried group stays one, sharing its attempts; a release gives each member its attempt back', async () => {
    const queue = freshQueue('co-retry');
    const items = await ledger.enqueueMany(
      [1, 2, 3].map((n) => ({ queue, type: 'upd', lane: 'L', payload: { n }, maxAttempts: 3 })),
    );
    const first = await claimGroup(queue);
    expect(first.group?.ids).toHaveLength(2);
    expect(await ledger.retry(first, { error: 'boom', delayMs: 0 })).toMatchObject({ won: true, state: 'pending' });
    expect(
      (await Promise.all(items.map((i) => mustGet(ledger, i.id)))).map((i) => [i.state, i.attempt, i.isHead]),
    ).toEqual([
      ['pending', 1, true],
      ['pending', 1, false],
      ['pending', 1, false],
    ]);
    const second = await claimGroup(queue);
    expect(second).toMatchObject({ id: items[0]!.id, attempt: 2 });
    expect(second.group?.ids).toEqual([items[1]!.id, items[2]!.id]);
    expect(await ledger.release(second, { reason: 'shutdown' })).toMatchObject({ won: true });
    expect((await Promise.all(items.map((i) => mustGet(ledger, i.id)))).map((i) => i.attempt)).toEqual([1, 1, 1]);
    const third = await claimGroup(queue);
    expect(await ledger.fail(third, { error: 'permanent' })).toMatchObject({ won: true, state: 'dead' });
    expect(await states(items.map((i) => i.id))).toEqual(['dead', 'dead', 'dead']);
  });

  test('a group with a lost lease finalizes nothing; an expired one is reclaimed whole, gathered again', async () => {
    const queue = freshQueue('co-lost');
    const items = await ledger.enqueueMany([1, 2].map((n) => ({ queue, type: 'upd', lane: 'L', payload: { n } })));
    const held = await claimGroup(queue, 'latest', 1000, 300);
    expect(await ledger.complete(withForeignToken(held))).toMatchObject({ won: false });
    expect(await states(items.map((i) => i.id))).toEqual(['processing', 'processing']);
    // One reclaim takes the whole group back: its members expire with the head, to the microsecond.
    const reclaimed = await waitFor(
      async () => {
        const r = await ledger.reclaimExpired({ queue });
        return r.reclaimed.length > 0 ? r.reclaimed : undefined;
      },
      10_000,
      'reclaim',
    );
    expect([...reclaimed].sort()).toEqual(items.map((i) => i.id).sort());
    expect(await states(items.map((i) => i.id))).toEqual(['pending', 'pending']);
    // The stale holder's completion loses; the group is gathered again by the next claim.
    expect(await ledger.complete(held)).toMatchObject({ won: false });
    const again = await claimGroup(queue);
    expect(again.group?.ids).toEqual([items[1]!.id]);
    expect(await ledger.complete(again)).toMatchObject({ won: true });
    expect(await states(items.map((i) => i.id))).toEqual(['completed', 'completed']);
  });

  test(
    'a group split by a reclaim (its head taken back alone) keeps lane ' +
      'order: the held member becomes the head once the head ends',
    async () => {
      const queue = freshQueue('co-split');
      const items = await ledger.enqueueMany([1, 2, 3].map((n) => ({ queue, type: 'upd', lane: 'L', payload: { n } })));
      const held = await claimGroup(queue, 'latest', 1, 60_000);
      expect(held.group?.ids).toEqual([items[1]!.id]);
      // Only the head's lease runs out (as when a reclaim's batch ends between a group's rows).
      await sql`UPDATE ${ledger.tables.items} SET lease_until = NOW(6) - INTERVAL 1 SECOND
        WHERE id = ${held.id}`.execute(ledger.db);
      expect((await ledger.reclaimExpired({ queue })).reclaimed).toEqual([held.id]);
      // The head runs again alone (its member is still held), and ends: the held member, not the item
      // after it, is the lane's head.
      const alone = await claimGroup(queue);
      expect(alone.id).toBe(held.id);
      expect(alone.group).toBeUndefined();
      expect(await ledger.complete(alone)).toMatchObject({ won: true });
      expect(await mustGet(ledger, items[1]!.id)).toMatchObject({ state: 'processing', isHead: true });
      expect((await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items).toEqual([]);
      // Its lease runs out too; it is claimed next, with the item after it.
      await sql`UPDATE ${ledger.tables.items} SET lease_until = NOW(6) - INTERVAL 1 SECOND
        WHERE id = ${items[1]!.id}`.execute(ledger.db);
      expect((await ledger.reclaimExpired({ queue })).reclaimed).toEqual([items[1]!.id]);
      const next = await claimGroup(queue);
      expect(next.id).toBe(items[1]!.id);
      expect(next.group?.ids).toEqual([items[2]!.id]);
    },
  );

  test(
    'all and settled modes hand over payloads in lane order; ' +
      'settled adds the ones that ended unsettled; the cap holds',
    async () => {
      const queue = freshQueue('co-modes');
      const first = await ledger.enqueueMany([1, 2].map((n) => ({ queue, type: 'upd', lane: 'L', payload: { n } })));
      const a = await claimGroup(queue, 'all');
      expect(a.group?.payloads).toEqual([{ n: 1 }, { n: 2 }]);
      expect(await ledger.complete(a)).toMatchObject({ won: true });
      // n=3 dies alone, n=4 is cancelled while waiting; then n=5..7 arrive.
      await ledger.enqueue({ queue, type: 'upd', lane: 'L', payload: { n: 3 } });
      const dies = await claimGroup(queue, 'settled');
      expect(dies.group).toBeUndefined();
      const cancelled = await ledger.enqueue({ queue, type: 'upd', lane: 'L', payload: { n: 4 } });
      await ledger.cancel(cancelled.id, 'not needed');
      expect((await mustGet(ledger, cancelled.id)).state).toBe('cancelled');
      await ledger.enqueueMany([5, 6, 7].map((n) => ({ queue, type: 'upd', lane: 'L', payload: { n } })));
      expect(await ledger.fail(dies, { error: 'bad' })).toMatchObject({ state: 'dead' });
      const s = await claimGroup(queue, 'settled', 1);
      // The cap: one member. Settled: since the last completed (n=2), the dead n=3 and cancelled n=4 first.
      expect(s.payload).toEqual({ n: 5 });
      expect(s.group?.payloads).toEqual([{ n: 3 }, { n: 4 }, { n: 5 }, { n: 6 }]);
      expect(await ledger.complete(s)).toMatchObject({ won: true });
      const rest = await claimGroup(queue, 'settled');
      expect(rest.payload).toEqual({ n: 7 });
      expect(rest.group).toBeUndefined();
      expect(first).toHaveLength(2);
    },
  );
});
