import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { freshQueue, history, mustGet, only } from './support/items.js';
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

/** The item `first`, then `backlog` items due after it, all claimable heads of `queue`. */
async function firstThenBacklog(queue: string, backlog: number, lane?: string): Promise<string> {
  const first = await ledger.enqueue({ queue, type: 't', payload: { n: -1 }, ...(lane !== undefined ? { lane } : {}) });
  const batch = Array.from({ length: backlog }, (_, n) => ({ queue, type: 't', payload: { n } }));
  for (let i = 0; i < batch.length; i += 1000) await ledger.enqueueMany(batch.slice(i, i + 1000));
  return first.id;
}

async function claimIt(queue: string, id: string, leaseMs: number, owner = 'holder'): Promise<ClaimedItem> {
  return only(await ledger.claimByIds({ queue, owner, leaseMs, ids: [id] }), `claim of ${id}`);
}

/**
 * The items one claim of 8 (as a consumer with 8 free slots makes it) takes
 * now. Half of every claim is the earliest due heads (docs/design/states.md,
 * "Keeping its place"), so an item that kept its place in front of a
 * backlog is in the very next claim; one sent to the back would not be.
 */
async function nextClaim(queue: string): Promise<string[]> {
  return (await ledger.claim({ queue, owner: 'next', limit: 8, leaseMs: 60_000 })).items.map((i) => i.id);
}

describe('an item handed back without spending an attempt keeps its place', () => {
  test('a reclaimed lease is among the next claimed, ahead of a backlog due after it', async () => {
    const queue = freshQueue('reclaim-place');
    const id = await firstThenBacklog(queue, 3000);
    const before = await mustGet(ledger, id);
    await claimIt(queue, id, 150, 'crashed');
    await waitFor(
      async () => (await ledger.reclaimExpired({ queue })).reclaimed.includes(id) || undefined,
      10_000,
      'the lease to expire and be reclaimed',
    );
    const after = await mustGet(ledger, id);
    expect(after).toMatchObject({ state: 'pending', attempt: 1 });
    expect(await nextClaim(queue)).toContain(id);
    expect(after.runAfter.getTime()).toBe(before.runAfter.getTime());
  });

  test('a reclaimed lane head keeps its lane moving before younger lanes', async () => {
    const queue = freshQueue('reclaim-lane');
    const id = await firstThenBacklog(queue, 3000, 'L');
    const successor = await ledger.enqueue({ queue, type: 't', payload: { n: 'next' }, lane: 'L' });
    await claimIt(queue, id, 150, 'crashed');
    await waitFor(
      async () => (await ledger.reclaimExpired({ queue })).reclaimed.includes(id) || undefined,
      10_000,
      'the lease to expire and be reclaimed',
    );
    expect(await nextClaim(queue)).toContain(id);
    const head = await mustGet(ledger, id);
    expect(head.state).toBe('processing');
    expect((await mustGet(ledger, successor.id)).state).toBe('pending');
    const done = await ledger.complete({
      id: head.id,
      queue,
      type: head.type,
      lane: head.lane,
      laneSeq: head.laneSeq,
      concurrencyKey: null,
      keyScope: null,
      leaseToken: head.leaseToken ?? '',
      leaseOwner: head.leaseOwner ?? '',
      attempt: head.attempt,
      maxAttempts: head.maxAttempts,
      startedAt: head.startedAt,
    });
    expect(done.won).toBe(true);
    expect((await mustGet(ledger, successor.id)).isHead).toBe(true);
  });

  test('a release without delay (shutdown, a prefetched item handed back) keeps the due time', async () => {
    const queue = freshQueue('release-place');
    const id = await firstThenBacklog(queue, 3000);
    const before = await mustGet(ledger, id);
    const held = await claimIt(queue, id, 60_000);
    expect((await ledger.release(held, { reason: 'shutdown' })).won).toBe(true);
    const after = await mustGet(ledger, id);
    expect(after).toMatchObject({ state: 'pending', attempt: 0 });
    expect(await nextClaim(queue)).toContain(id);
    expect(after.runAfter.getTime()).toBe(before.runAfter.getTime());
  });

  test('a holder that stopped renewing has all its items in the next claim, ahead of a many-lane backlog', async () => {
    const queue = freshQueue('rescue-first');
    // Four heads due first, then a backlog of 3,000 items over 300 lanes and 1,000 laneless ones.
    const held = await ledger.enqueueMany(
      Array.from({ length: 4 }, (_, n) => ({ queue, type: 't', payload: { held: n }, lane: `held-${n}` })),
    );
    const backlog = [
      ...Array.from({ length: 3000 }, (_, n) => ({ queue, type: 't', payload: { n }, lane: `lane-${n % 300}` })),
      ...Array.from({ length: 1000 }, (_, n) => ({ queue, type: 't', payload: { n } })),
    ];
    for (let i = 0; i < backlog.length; i += 1000) await ledger.enqueueMany(backlog.slice(i, i + 1000));
    const ids = held.map((r) => r.id);
    const claimed = await ledger.claimByIds({ queue, owner: 'dies', leaseMs: 200, ids });
    expect(claimed.map((c) => c.id).sort()).toEqual([...ids].sort());
    // It never renews: once the leases ran out, the sweep's reclaim hands them back.
    const reclaimed = new Set<string>();
    await waitFor(
      async () => {
        for (const id of (await ledger.reclaimExpired({ queue })).reclaimed) reclaimed.add(id);
        return reclaimed.size === ids.length || undefined;
      },
      10_000,
      'the four leases to expire and be reclaimed',
    );
    const next = await nextClaim(queue);
    expect(next).toHaveLength(8);
    for (const id of ids) expect(next).toContain(id);
  });

  test('a release with a delay moves the due time (deadline, defer, rate limit)', async () => {
    const queue = freshQueue('release-delay');
    const { id } = await ledger.enqueue({ queue, type: 't', payload: 1 });
    const before = await mustGet(ledger, id);
    const held = await claimIt(queue, id, 60_000);
    expect((await ledger.release(held, { delayMs: 60_000 })).won).toBe(true);
    expect((await mustGet(ledger, id)).runAfter.getTime()).toBeGreaterThan(before.runAfter.getTime() + 50_000);
  });
});

describe('a completed item shows no old failure', () => {
  test('completion clears the last error and failure class; the attempt history keeps them', async () => {
    const queue = freshQueue('complete-clears');
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1 },
      { queue, type: 't', payload: 2 },
    ]);
    for (const id of [a!.id, b!.id]) {
      const first = await claimIt(queue, id, 60_000);
      expect((await ledger.retry(first, { error: new Error('flaky upstream'), delayMs: 0 })).won).toBe(true);
      expect(await mustGet(ledger, id)).toMatchObject({ failureClass: 'error' });
    }
    // One through the single-item path, one through the batch path.
    expect((await ledger.complete(await claimIt(queue, a!.id, 60_000), { ok: 1 })).won).toBe(true);
    const [many] = await ledger.completeMany([{ handle: await claimIt(queue, b!.id, 60_000), result: { ok: 2 } }]);
    expect(many?.won).toBe(true);
    for (const id of [a!.id, b!.id]) {
      const item = await mustGet(ledger, id);
      expect(item).toMatchObject({ state: 'completed', failureClass: null, lastError: null });
      const attempts = await history(ledger, id);
      expect(attempts.map((x) => x.outcome)).toEqual(['retried', 'completed']);
      expect(attempts[0]?.error).toContain('flaky upstream');
    }
  });
});
