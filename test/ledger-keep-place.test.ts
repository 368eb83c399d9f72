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
 * How many items small claims (8 at a time, as a consumer with 8 free slots
 * makes them) take before `id`, giving up after 1000. Claims pick at random
 * among the earliest due (a window 8 times their size, so concurrent claimers
 * collide less): an item that kept its place is in that window from the
 * first claim on and is taken within a few claims (the chance it is not
 * taken within 1000 items is below 1e-7), one sent to the back of a
 * 3000-item backlog only after all of it.
 */
async function claimedBefore(queue: string, id: string): Promise<number> {
  let before = 0;
  while (before < 1000) {
    const r = await ledger.claim({ queue, owner: 'next', limit: 8, leaseMs: 60_000 });
    if (r.items.some((i) => i.id === id)) return before;
    before += r.items.length;
    if (r.items.length === 0) break;
  }
  return Number.POSITIVE_INFINITY;
}

describe('an item handed back without spending an attempt keeps its place', () => {
  test('a reclaimed lease is among the next claimed, ahead of a backlog due after it', async () => {
    const queue = freshQueue('reclaim-place');
    const id = await firstThenBacklog(queue, 3000);
    const before = await mustGet(ledger, id);
    await claimIt(queue, id, 150, 'crashed');
    await waitFor(async () => (await ledger.reclaimExpired({ queue })).reclaimed.includes(id) || undefined, 10_000, 'the lease to expire and be reclaimed');
    const after = await mustGet(ledger, id);
    expect(after).toMatchObject({ state: 'pending', attempt: 1 });
    expect(await claimedBefore(queue, id)).toBeLessThan(1000);
    expect(after.runAfter.getTime()).toBe(before.runAfter.getTime());
  });

  test('a reclaimed lane head keeps its lane moving before younger lanes', async () => {
    const queue = freshQueue('reclaim-lane');
    const id = await firstThenBacklog(queue, 3000, 'L');
    const successor = await ledger.enqueue({ queue, type: 't', payload: { n: 'next' }, lane: 'L' });
    await claimIt(queue, id, 150, 'crashed');
    await waitFor(async () => (await ledger.reclaimExpired({ queue })).reclaimed.includes(id) || undefined, 10_000, 'the lease to expire and be reclaimed');
    expect(await claimedBefore(queue, id)).toBeLessThan(1000);
    const head = await mustGet(ledger, id);
    expect(head.state).toBe('processing');
    expect((await mustGet(ledger, successor.id)).state).toBe('pending');
    const done = await ledger.complete({
      id: head.id, queue, lane: head.lane, laneSeq: head.laneSeq, leaseToken: head.leaseToken ?? '', leaseOwner: head.leaseOwner ?? '',
      attempt: head.attempt, maxAttempts: head.maxAttempts, startedAt: head.startedAt,
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
    expect(await claimedBefore(queue, id)).toBeLessThan(1000);
    expect(after.runAfter.getTime()).toBe(before.runAfter.getTime());
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
