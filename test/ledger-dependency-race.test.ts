import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import { claimOne, freshQueue, history, mustGet, only, waitRow } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

describe('a dependency wake is never lost', () => {
  test('a wake between the handler reading the fact and its block sends the item back to pending', async () => {
    const queue = freshQueue('dep-race');
    const { id } = await ledger.enqueue({ queue, type: 't', payload: 1 });
    // The attempt begins; the handler reads the awaited fact: absent.
    const held = await claimOne(ledger, queue);
    // The fact commits and its producer wakes the key: nothing is blocked on it yet.
    expect(await ledger.wakeDependency('repo:7')).toEqual([]);
    // Then the handler throws BlockOn('repo:7').
    const r = await ledger.block(held, { dependencyKey: 'repo:7', maxWaitMs: 600_000 });
    expect(r).toEqual({ won: true, state: 'pending' });
    const item = await mustGet(ledger, id);
    expect(item).toMatchObject({ state: 'pending', attempt: 0, blockExpiresAt: null });
    expect(await waitRow(ledger, id)).toBeUndefined();
    // Claimable at once, and the next attempt blocks normally: the wake came before it began.
    const again = await claimOne(ledger, queue);
    expect(again.id).toBe(id);
    expect(await ledger.block(again, { dependencyKey: 'repo:7', maxWaitMs: 600_000 })).toEqual({
      won: true,
      state: 'blocked',
    });
    expect((await ledger.wakeDependency('repo:7')).map((w) => w.id)).toEqual([id]);
  });

  test('a wake before the attempt began does not keep a later block from parking', async () => {
    const queue = freshQueue('dep-before');
    await ledger.wakeDependency('dep-before-key');
    const { id } = await ledger.enqueue({ queue, type: 't', payload: 1 });
    const held = await claimOne(ledger, queue);
    expect(await ledger.block(held, { dependencyKey: 'dep-before-key', maxWaitMs: 600_000 })).toEqual({
      won: true,
      state: 'blocked',
    });
    expect((await waitRow(ledger, id))?.dependencyKey).toBe('dep-before-key');
  });

  test('blocks racing wakes of their keys: no item is left blocked', async () => {
    const queue = freshQueue('dep-race-many');
    const n = 40;
    await ledger.enqueueMany(Array.from({ length: n }, (_, i) => ({ queue, type: 't', payload: i })));
    const held = (await ledger.claim({ queue, owner: 'w', limit: n, leaseMs: 60_000 })).items;
    expect(held).toHaveLength(n);
    await Promise.all(
      held.map(async (item, i) => {
        const key = `race:${i}`;
        // The two race in either order; whatever the order, the wake must not be lost.
        const block = ledger.block(item, { dependencyKey: key, maxWaitMs: 600_000 });
        const wake = ledger.wakeDependency(key);
        await Promise.all([block, wake]);
      }),
    );
    for (const item of held) expect((await mustGet(ledger, item.id)).state, item.id).toBe('pending');
  });

  test('a wait past its maxWait gets a final run; only a re-block after that ends it dead', async () => {
    const queue = freshQueue('dep-final');
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, lane: 'L' },
      { queue, type: 't', payload: 2, lane: 'L' },
    ]);
    const c = await claimOne(ledger, queue);
    expect(c.id).toBe(a!.id);
    expect((await ledger.block(c, { dependencyKey: 'dep-exp', maxWaitMs: 150 })).state).toBe('blocked');
    const probe = await waitFor(
      async () => {
        const r = await ledger.probeDependencyWaits({ queue });
        return r.expired.length > 0 ? r : undefined;
      },
      10_000,
      'the expired wait to be probed',
    );
    expect(probe.expired).toEqual([a!.id]);
    expect(probe.probed.map((p) => p.id)).toEqual([a!.id]);
    expect(await mustGet(ledger, a!.id)).toMatchObject({ state: 'pending', isHead: true });
    // The final run re-checks and blocks again: now the wait is over.
    const last = await claimOne(ledger, queue);
    expect(last.id).toBe(a!.id);
    expect(await ledger.block(last, { dependencyKey: 'dep-exp', maxWaitMs: 150 })).toEqual({
      won: true,
      state: 'dead',
      failureClass: 'dependency_expired',
    });
    const item = await mustGet(ledger, a!.id);
    expect(item).toMatchObject({ state: 'dead', failureClass: 'dependency_expired' });
    expect(item.lastError).toContain('dep-exp');
    expect((await history(ledger, a!.id)).map((h) => h.outcome)).toEqual(['blocked', 'dead']);
    expect(await waitRow(ledger, a!.id)).toBeUndefined();
    // Its lane moves on, and waking the key later finds nothing to move.
    expect(only((await ledger.claim({ queue, owner: 'w', limit: 5, leaseMs: 60_000 })).items).id).toBe(b!.id);
    expect(await ledger.wakeDependency('dep-exp')).toEqual([]);
  });

  test('the final run may succeed: the item completes instead of dying', async () => {
    const queue = freshQueue('dep-final-ok');
    const { id } = await ledger.enqueue({ queue, type: 't', payload: 1 });
    expect(
      (await ledger.block(await claimOne(ledger, queue), { dependencyKey: 'dep-late', maxWaitMs: 100 })).state,
    ).toBe('blocked');
    await waitFor(
      async () => (await ledger.probeDependencyWaits({ queue })).expired.includes(id) || undefined,
      10_000,
      'the final probe',
    );
    expect((await ledger.complete(await claimOne(ledger, queue))).won).toBe(true);
    expect((await mustGet(ledger, id)).state).toBe('completed');
  });
});
