// The ledger's transitions: claim, renew, checkpoint, and how a holder ends an attempt (complete,
// retry, fail, release, skip).
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Ledger } from '../src/ledger/ledger.js';
import { claimAll, claimOne, freshQueue, history, ms, mustGet, only } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

describe('claim', () => {
  test('only due pending heads; lease owner, token, until and attempt are set', async () => {
    const queue = freshQueue('claim');
    const [h1, h1b, single, future] = await ledger.enqueueMany([
      { queue, type: 't', payload: 'h1', lane: 'L1' },
      { queue, type: 't', payload: 'h1b', lane: 'L1' },
      { queue, type: 't', payload: 'single' },
      { queue, type: 't', payload: 'future', delayMs: 3_600_000 },
    ]);
    const before = await ledger.now();
    const c = await ledger.claim({ queue, owner: 'consumer-7', limit: 10, leaseMs: 45_000 });
    const after = await ledger.now();
    expect(c.items.map((i) => i.id).sort()).toEqual([h1!.id, single!.id].sort());
    expect(c.moreAvailable).toBe(false);
    const tokens = new Set<string>();
    for (const item of c.items) {
      expect(item.state).toBe('processing');
      expect(item.leaseOwner).toBe('consumer-7');
      expect(item.leaseToken).toMatch(/^[A-Za-z0-9_-]{16,32}$/);
      tokens.add(item.leaseToken);
      expect(item.attempt).toBe(1);
      expect(ms(item.leaseUntil)).toBeGreaterThanOrEqual(before.getTime() + 45_000);
      expect(ms(item.leaseUntil)).toBeLessThanOrEqual(after.getTime() + 45_000);
      expect(ms(item.startedAt)).toBeGreaterThanOrEqual(before.getTime());
      expect(item.epoch).toBeNull();
      expect(await mustGet(ledger, item.id)).toEqual(item);
    }
    expect(tokens.size).toBe(1); // one claim, one token
    // Nothing else is claimable: the lane's second item waits for its head, the future item for its time.
    expect(await claimAll(ledger, queue)).toEqual([]);
    expect((await mustGet(ledger, h1b!.id)).state).toBe('pending');
    expect((await mustGet(ledger, future!.id)).attempt).toBe(0);
  });

  test('a new claim after a retry carries a new token and the next attempt', async () => {
    const queue = freshQueue('claim-token');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const first = await claimOne(ledger, queue);
    expect((await ledger.retry(first, { error: 'x', delayMs: 0 })).won).toBe(true);
    const second = await claimOne(ledger, queue, 'worker-b');
    expect(second.id).toBe(first.id);
    expect(second.attempt).toBe(2);
    expect(second.leaseToken).not.toBe(first.leaseToken);
    expect(second.leaseOwner).toBe('worker-b');
  });

  test('claimByIds takes exactly the named due pending heads', async () => {
    const queue = freshQueue('claim-ids');
    const [head, next, future, lone, done] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, lane: 'L' },
      { queue, type: 't', payload: 2, lane: 'L' },
      { queue, type: 't', payload: 3, delayMs: 3_600_000 },
      { queue, type: 't', payload: 4 },
      { queue, type: 't', payload: 5 },
    ]);
    const otherQueue = await ledger.enqueue({ queue: freshQueue('claim-ids-other'), type: 't', payload: 6 });
    const d = only(await ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids: [done!.id] }));
    expect((await ledger.complete(d)).won).toBe(true);

    const ids = [head!.id, next!.id, future!.id, done!.id, otherQueue.id, 'no-such-item'];
    const got = await ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids });
    expect(got.map((i) => i.id)).toEqual([head!.id]);
    expect(only(got).attempt).toBe(1);
    expect(only(got).leaseOwner).toBe('w');
    expect((await mustGet(ledger, lone!.id)).state).toBe('pending'); // not named, not claimed
    expect((await mustGet(ledger, otherQueue.id)).state).toBe('pending');
    // Already processing: a second targeted claim gets nothing.
    expect(await ledger.claimByIds({ queue, owner: 'w2', leaseMs: 60_000, ids: [head!.id] })).toEqual([]);
    expect(await ledger.claimByIds({ queue, owner: 'w2', leaseMs: 60_000, ids: [] })).toEqual([]);
  });
});

describe('renew', () => {
  test('extends leaseUntil from the ledger clock', async () => {
    const queue = freshQueue('renew');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue, 'w', 1_000);
    const before = await ledger.now();
    const r = await ledger.renew(c, 120_000);
    expect(r).toEqual({ renewed: true, cancelRequested: false });
    const item = await mustGet(ledger, c.id);
    expect(ms(item.leaseUntil)).toBeGreaterThanOrEqual(before.getTime() + 120_000);
    expect(ms(item.leaseUntil)).toBeGreaterThan(ms(c.leaseUntil));
    expect(item.state).toBe('processing');
    expect(item.attempt).toBe(1);
  });

  test('reports cancelRequested after cancel of a processing item', async () => {
    const queue = freshQueue('renew-cancel');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue, 'w', 30_000);
    expect(await ledger.cancel(c.id, 'operator says stop')).toBe('cancel_requested');
    const mid = await mustGet(ledger, c.id);
    expect(mid.state).toBe('processing');
    expect(mid.cancelRequested).toBe(true);
    const r = await ledger.renew(c, 60_000);
    expect(r).toEqual({ renewed: true, cancelRequested: true });
    expect(ms((await mustGet(ledger, c.id)).leaseUntil)).toBeGreaterThan(ms(c.leaseUntil));
    // The holder may still finalize; the request does not take the item away.
    expect((await ledger.complete(c)).won).toBe(true);
  });
});

describe('checkpoint', () => {
  test('saved, and handed to the next attempt after a retry', async () => {
    const queue = freshQueue('checkpoint');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    expect(c.checkpoint).toBeNull();
    expect(await ledger.checkpoint(c, { step: 1 })).toBe(true);
    expect(await ledger.checkpoint(c, { step: 3, cursor: 'abc' })).toBe(true);
    expect((await mustGet(ledger, c.id)).checkpoint).toEqual({ step: 3, cursor: 'abc' });
    expect((await ledger.retry(c, { error: new Error('flaky'), delayMs: 0 })).won).toBe(true);
    const next = await claimOne(ledger, queue);
    expect(next.attempt).toBe(2);
    expect(next.checkpoint).toEqual({ step: 3, cursor: 'abc' });
  });
});

describe('complete', () => {
  test('stores the result; a first-try success writes no history', async () => {
    const queue = freshQueue('complete');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    expect(await ledger.complete(c, { sent: true, n: 2 })).toEqual({ won: true, state: 'completed' });
    const item = await mustGet(ledger, c.id);
    expect(item).toMatchObject({ state: 'completed', result: { sent: true, n: 2 }, leaseUntil: null, attempt: 1 });
    expect(item.terminalAt).toBeInstanceOf(Date);
    expect(await history(ledger, c.id)).toEqual([]);
  });

  test('without a result stores null; a later attempt writes a history row', async () => {
    const queue = freshQueue('complete-2');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c1 = await claimOne(ledger, queue);
    await ledger.retry(c1, { error: 'e', delayMs: 0 });
    const c2 = await claimOne(ledger, queue);
    expect((await ledger.complete(c2)).won).toBe(true);
    expect((await mustGet(ledger, c2.id)).result).toBeNull();
    expect((await history(ledger, c2.id)).map((h) => [h.attempt, h.outcome])).toEqual([
      [1, 'retried'],
      [2, 'completed'],
    ]);
  });

  test('a result over resultMaxBytes ends the item dead, class result_too_large', async () => {
    const queue = freshQueue('complete-big');
    const small = new Ledger({ url: tl.url, poolSize: 2, resultMaxBytes: 100 });
    try {
      await small.enqueue({ queue, type: 't', payload: 1 });
      const c = await claimOne(small, queue);
      const r = await small.complete(c, { blob: 'x'.repeat(200) });
      expect(r).toEqual({ won: true, state: 'dead', failureClass: 'result_too_large' });
      const item = await mustGet(ledger, c.id);
      expect(item.state).toBe('dead');
      expect(item.failureClass).toBe('result_too_large');
      expect(item.result).toBeNull();
      expect(item.lastError).toMatch(/100/);
      expect(only(await history(ledger, c.id))).toMatchObject({ outcome: 'dead', failureClass: 'result_too_large' });
      // A result that fits is stored.
      await small.enqueue({ queue, type: 't', payload: 2 });
      const c2 = await claimOne(small, queue);
      expect(await small.complete(c2, 'ok')).toEqual({ won: true, state: 'completed' });
    } finally {
      await small.close();
    }
  });
});

describe('retry', () => {
  test('pending again after the delay, last error and a history row', async () => {
    const queue = freshQueue('retry');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue, 'worker-r');
    const before = await ledger.now();
    const r = await ledger.retry(c, { error: new Error('connection reset'), delayMs: 5_000 });
    expect(r).toEqual({ won: true, state: 'pending', delayMs: 5_000, failureClass: 'error' });
    const item = await mustGet(ledger, c.id);
    expect(item.state).toBe('pending');
    expect(item.attempt).toBe(1);
    expect(item.leaseUntil).toBeNull();
    expect(item.failureClass).toBe('error');
    expect(item.lastError).toContain('connection reset');
    expect(ms(item.runAfter)).toBeGreaterThanOrEqual(before.getTime() + 5_000);
    expect(await claimAll(ledger, queue)).toEqual([]);
    const h = only(await history(ledger, c.id));
    expect(h).toMatchObject({
      itemId: c.id,
      attempt: 1,
      outcome: 'retried',
      failureClass: 'error',
      worker: 'worker-r',
    });
    expect(h.error).toContain('connection reset');
    expect(ms(h.startedAt)).toBe(ms(c.startedAt));
  });

  test('backoff policy decides the delay when none is given', async () => {
    const queue = freshQueue('retry-backoff');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    const before = await ledger.now();
    const r = await ledger.retry(c, { error: 'x', failureClass: 'http.503', backoff: { baseMs: 7_000, jitter: 0 } });
    expect(r.delayMs).toBe(7_000);
    const item = await mustGet(ledger, c.id);
    expect(item.failureClass).toBe('http.503');
    expect(ms(item.runAfter)).toBeGreaterThanOrEqual(before.getTime() + 7_000);
  });

  test('when attempt >= maxAttempts the item is dead', async () => {
    const queue = freshQueue('retry-dead');
    await ledger.enqueue({ queue, type: 't', payload: 1, maxAttempts: 2 });
    const c1 = await claimOne(ledger, queue);
    expect((await ledger.retry(c1, { error: 'one', delayMs: 0 })).state).toBe('pending');
    const c2 = await claimOne(ledger, queue);
    expect(c2.attempt).toBe(2);
    const r = await ledger.retry(c2, { error: 'two', delayMs: 0, failureClass: 'timeout' });
    expect(r).toMatchObject({ won: true, state: 'dead' });
    const item = await mustGet(ledger, c1.id);
    expect(item).toMatchObject({ state: 'dead', failureClass: 'timeout', lastError: 'two', attempt: 2 });
    expect(item.terminalAt).toBeInstanceOf(Date);
    expect((await history(ledger, c1.id)).map((h) => h.outcome)).toEqual(['retried', 'dead']);
    expect(await claimAll(ledger, queue)).toEqual([]);
  });
});

describe('fail, release, skip', () => {
  test('fail: dead at once, class permanent', async () => {
    const queue = freshQueue('fail');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    expect(await ledger.fail(c, { error: new Error('bad request') })).toEqual({
      won: true,
      state: 'dead',
      failureClass: 'permanent',
    });
    const item = await mustGet(ledger, c.id);
    expect(item).toMatchObject({ state: 'dead', failureClass: 'permanent', attempt: 1, leaseUntil: null });
    expect(item.lastError).toContain('bad request');
    expect(only(await history(ledger, c.id))).toMatchObject({ outcome: 'dead', failureClass: 'permanent' });
    expect(await ledger.listDead({ queue })).toEqual([item]);
  });

  test('release: pending again, the attempt given back, no budget burnt', async () => {
    const queue = freshQueue('release');
    await ledger.enqueue({ queue, type: 't', payload: 1, maxAttempts: 1 });
    for (let k = 0; k < 3; k++) {
      const c = await claimOne(ledger, queue);
      expect(c.attempt).toBe(1);
      expect(await ledger.release(c, { reason: 'draining' })).toEqual({ won: true, state: 'pending', delayMs: 0 });
      const item = await mustGet(ledger, c.id);
      expect(item).toMatchObject({ state: 'pending', attempt: 0, leaseUntil: null });
    }
    const h = await history(ledger, (await claimOne(ledger, queue)).id);
    expect(h.map((x) => [x.attempt, x.outcome, x.error])).toEqual([
      [1, 'released', 'draining'],
      [1, 'released', 'draining'],
      [1, 'released', 'draining'],
    ]);
  });

  test('release with a delay is not claimable before it', async () => {
    const queue = freshQueue('release-delay');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    const before = await ledger.now();
    expect((await ledger.release(c, { delayMs: 60_000 })).won).toBe(true);
    expect(ms((await mustGet(ledger, c.id)).runAfter)).toBeGreaterThanOrEqual(before.getTime() + 60_000);
    expect(await claimAll(ledger, queue)).toEqual([]);
  });

  test('skip: terminal, the reason stored', async () => {
    const queue = freshQueue('skip');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    expect(await ledger.skip(c, { why: 'stale' })).toEqual({ won: true, state: 'skipped' });
    const item = await mustGet(ledger, c.id);
    // The reason is the result as given, and as text the item's last word and its history entry's.
    expect(item).toMatchObject({
      state: 'skipped',
      result: { why: 'stale' },
      lastError: '{"why":"stale"}',
      failureClass: null,
    });
    expect(item.terminalAt).toBeInstanceOf(Date);
    expect(only(await history(ledger, c.id))).toMatchObject({ outcome: 'skipped', error: '{"why":"stale"}' });
  });
});
