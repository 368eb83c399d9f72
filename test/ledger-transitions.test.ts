import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { Ledger } from '../src/ledger/ledger.js';
import { LeaseLostError, OwnershipConflictError, ReplayRejectedError } from '../src/errors.js';
import { createLogger } from '../src/log.js';
import { Reconciler } from '../src/supervisor/reconciler.js';
import { errorDigest } from '../src/ledger/ids.js';
import type { ClaimedItem, WorkItem } from '../src/ledger/types.js';
import {
  claimAll,
  claimOne,
  freshQueue,
  history,
  historyCount,
  itemCount,
  laneRow,
  mustGet,
  only,
  waitRow,
  withForeignToken,
} from './support/items.js';
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

const ms = (d: Date | null | undefined): number => {
  if (!d) throw new Error('expected a date');
  return d.getTime();
};

/** Claims with a short lease, then waits until the reclaimer has taken it back. */
async function expireAndReclaim(queue: string, ids: readonly string[]): Promise<void> {
  const waiting = new Set(ids);
  await waitFor(
    async () => {
      const r = await ledger.reclaimExpired({ queue });
      for (const id of [...r.reclaimed, ...r.dead]) waiting.delete(id);
      return waiting.size === 0;
    },
    10_000,
    `reclaim of ${ids.length} expired lease(s)`,
  );
}

describe('enqueue', () => {
  test('one item: defaults, pending, due now, its own lane', async () => {
    const queue = freshQueue('enq-one');
    const before = await ledger.now();
    const r = await ledger.enqueue({ queue, type: 'send', payload: { to: 'x', n: [1, 2] } });
    const after = await ledger.now();
    expect(r.duplicate).toBe(false);
    expect(r.laneSeq).toBeNull();
    expect(r.id).toMatch(/^[A-Za-z0-9_-]{1,32}$/);
    const item = await mustGet(ledger, r.id);
    expect(item).toMatchObject({
      id: r.id,
      queue,
      type: 'send',
      lane: null,
      laneSeq: null,
      isHead: true,
      queueClass: 'default',
      priority: 0,
      payload: { to: 'x', n: [1, 2] },
      state: 'pending',
      attempt: 0,
      maxAttempts: 25,
      leaseOwner: null,
      leaseToken: null,
      leaseUntil: null,
      idempotencyKey: null,
      cancelRequested: false,
      checkpoint: null,
      result: null,
      lastError: null,
      failureClass: null,
      replayOf: null,
      startedAt: null,
      terminalAt: null,
    });
    expect(ms(item.runAfter)).toBeGreaterThanOrEqual(before.getTime());
    expect(ms(item.runAfter)).toBeLessThanOrEqual(after.getTime());
    expect(ms(item.createdAt)).toBeGreaterThanOrEqual(before.getTime());
    expect(await itemCount(ledger, queue)).toBe(1);
  });

  test('many items: results in input order, lane sequences per lane', async () => {
    const queue = freshQueue('enq-many');
    const r = await ledger.enqueueMany([
      { queue, type: 't', payload: 0, lane: 'a' },
      { queue, type: 't', payload: 1, lane: 'b' },
      { queue, type: 't', payload: 2, lane: 'a' },
      { queue, type: 't', payload: 3 },
      { queue, type: 't', payload: 4, lane: 'a' },
    ]);
    expect(r.map((x) => x.laneSeq)).toEqual([1, 1, 2, null, 3]);
    expect(new Set(r.map((x) => x.id)).size).toBe(5);
    expect(r.every((x) => !x.duplicate)).toBe(true);
    const items = await Promise.all(r.map((x) => mustGet(ledger, x.id)));
    expect(items.map((i) => i.payload)).toEqual([0, 1, 2, 3, 4]);
    expect(items.map((i) => i.isHead)).toEqual([true, true, false, true, false]);
    // A later batch continues the lane's sequence.
    const more = await ledger.enqueueMany([{ queue, type: 't', payload: 5, lane: 'a' }]);
    expect(only(more).laneSeq).toBe(4);
    expect(await ledger.enqueueMany([])).toEqual([]);
  });

  test('runAt in the future: not claimable until due, then claimable', async () => {
    const queue = freshQueue('enq-runat');
    const now = await ledger.now();
    const due = new Date(now.getTime() + 800);
    const far = await ledger.enqueue({ queue, type: 't', payload: 'far', runAt: new Date(now.getTime() + 3_600_000) });
    const soon = await ledger.enqueue({ queue, type: 't', payload: 'soon', runAt: due });
    expect(ms((await mustGet(ledger, soon.id)).runAfter)).toBe(due.getTime());
    expect((await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items).toEqual([]);
    const claimed = await waitFor(
      async () => {
        const c = await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 });
        return c.items.length > 0 ? c.items : undefined;
      },
      10_000,
      'the scheduled item to become claimable',
    );
    const item = only(claimed);
    expect(item.id).toBe(soon.id);
    expect(ms(item.startedAt)).toBeGreaterThanOrEqual(due.getTime());
    expect((await mustGet(ledger, far.id)).state).toBe('pending');
    // runAt in the past is due at once.
    const past = await ledger.enqueue({ queue, type: 't', payload: 'past', runAt: new Date(now.getTime() - 60_000) });
    expect(only(await claimAll(ledger, queue)).id).toBe(past.id);
  });

  test('delayMs: runAfter is the ledger clock plus the delay', async () => {
    const queue = freshQueue('enq-delay');
    const before = await ledger.now();
    const r = await ledger.enqueue({ queue, type: 't', payload: null, delayMs: 60_000 });
    const after = await ledger.now();
    const item = await mustGet(ledger, r.id);
    expect(ms(item.runAfter)).toBeGreaterThanOrEqual(before.getTime() + 60_000);
    expect(ms(item.runAfter)).toBeLessThanOrEqual(after.getTime() + 60_000);
    expect(item.payload).toBeNull();
    expect(await claimAll(ledger, queue)).toEqual([]);
  });

  test('priority: smaller first among claimable heads', async () => {
    const queue = freshQueue('enq-prio');
    const r = await ledger.enqueueMany(
      [5, -1, 0, 3, -7].map((priority) => ({ queue, type: 't', payload: priority, priority })),
    );
    expect(r).toHaveLength(5);
    const two = await ledger.claim({ queue, owner: 'w', limit: 2, leaseMs: 60_000 });
    expect(two.items.map((i) => i.priority).sort((a, b) => a - b)).toEqual([-7, -1]);
    expect(two.moreAvailable).toBe(true);
    const order: number[] = [];
    for (let k = 0; k < 3; k++) order.push(only((await ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 60_000 })).items).priority);
    expect(order).toEqual([0, 3, 5]);
  });

  test('claim filters: queue classes and types', async () => {
    const queue = freshQueue('enq-filter');
    await ledger.enqueueMany([
      { queue, type: 'a', payload: 1, queueClass: 'interactive' },
      { queue, type: 'a', payload: 2, queueClass: 'bulk' },
      { queue, type: 'b', payload: 3, queueClass: 'bulk' },
      { queue, type: 'b', payload: 4 },
      { queue, type: 'c', payload: 5, queueClass: 'default' },
    ]);
    const bulk = await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000, classes: ['bulk'] });
    expect(bulk.items.map((i) => i.payload).sort()).toEqual([2, 3]);
    expect(bulk.items.every((i) => i.queueClass === 'bulk')).toBe(true);
    const typeB = await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000, types: ['b'] });
    expect(typeB.items.map((i) => i.payload)).toEqual([4]);
    const interactiveC = await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000, classes: ['interactive'], types: ['c'] });
    expect(interactiveC.items).toEqual([]);
    const rest = await claimAll(ledger, queue);
    expect(rest.map((i) => i.payload).sort()).toEqual([1, 5]);
    // Another queue's items are never claimed.
    expect(await claimAll(ledger, freshQueue('enq-filter-empty'))).toEqual([]);
  });

  test('maxAttempts: default 25, explicit value kept', async () => {
    const queue = freshQueue('enq-max');
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1 },
      { queue, type: 't', payload: 2, maxAttempts: 3 },
    ]);
    expect((await mustGet(ledger, a!.id)).maxAttempts).toBe(25);
    expect((await mustGet(ledger, b!.id)).maxAttempts).toBe(3);
  });
});

describe('idempotency key', () => {
  test('second enqueue returns the first id with duplicate:true and writes nothing', async () => {
    const queue = freshQueue('idem');
    const first = await ledger.enqueue({ queue, type: 't', payload: { v: 1 }, lane: 'L', idempotencyKey: 'order-1' });
    const second = await ledger.enqueue({ queue, type: 't', payload: { v: 2 }, lane: 'L', idempotencyKey: 'order-1' });
    expect(first.duplicate).toBe(false);
    expect(second).toEqual({ id: first.id, duplicate: true, laneSeq: 1 });
    expect(await itemCount(ledger, queue)).toBe(1);
    expect((await mustGet(ledger, first.id)).payload).toEqual({ v: 1 });
    expect(await laneRow(ledger, queue, 'L')).toEqual({ nextSeq: 1, busy: true });
    // Still a duplicate after the first has finished.
    const c = await claimOne(ledger, queue);
    expect((await ledger.complete(c)).won).toBe(true);
    expect(await ledger.enqueue({ queue, type: 't', payload: 3, idempotencyKey: 'order-1' })).toMatchObject({ id: first.id, duplicate: true });
    // The key is unique per queue, not globally.
    const other = await ledger.enqueue({ queue: freshQueue('idem-other'), type: 't', payload: 1, idempotencyKey: 'order-1' });
    expect(other.duplicate).toBe(false);
    expect(other.id).not.toBe(first.id);
  });

  test('duplicate inside one batch', async () => {
    const queue = freshQueue('idem-batch');
    const r = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, idempotencyKey: 'k1', lane: 'L' },
      { queue, type: 't', payload: 2, idempotencyKey: 'k1', lane: 'L' },
      { queue, type: 't', payload: 3, idempotencyKey: 'k2', lane: 'L' },
      { queue, type: 't', payload: 4 },
    ]);
    expect(r[0]).toMatchObject({ duplicate: false, laneSeq: 1 });
    expect(r[1]).toEqual({ id: r[0]!.id, duplicate: true, laneSeq: 1 });
    expect(r[2]).toMatchObject({ duplicate: false, laneSeq: 2 });
    expect(r[3]!.duplicate).toBe(false);
    expect(new Set(r.map((x) => x.id)).size).toBe(3);
    expect(await itemCount(ledger, queue)).toBe(3);
    expect(await laneRow(ledger, queue, 'L')).toEqual({ nextSeq: 2, busy: true });
  });
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
    expect(h).toMatchObject({ itemId: c.id, attempt: 1, outcome: 'retried', failureClass: 'error', worker: 'worker-r' });
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
    expect(await ledger.fail(c, { error: new Error('bad request') })).toEqual({ won: true, state: 'dead', failureClass: 'permanent' });
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
      expect(await ledger.release(c, { reason: 'draining' })).toEqual({ won: true, state: 'pending' });
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
    expect(item).toMatchObject({ state: 'skipped', result: { why: 'stale' } });
    expect(item.terminalAt).toBeInstanceOf(Date);
    expect(only(await history(ledger, c.id)).outcome).toBe('skipped');
  });
});

describe('block and dependencies', () => {
  test('block parks the item; wakeDependency makes it pending again', async () => {
    const queue = freshQueue('block');
    const otherQueue = freshQueue('block-other');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    await ledger.enqueue({ queue: otherQueue, type: 't', payload: 2 });
    const c = await claimOne(ledger, queue);
    const o = await claimOne(ledger, otherQueue);
    const before = await ledger.now();
    expect(await ledger.block(c, { dependencyKey: 'repo:42', maxWaitMs: 600_000 })).toEqual({ won: true, state: 'blocked' });
    expect((await ledger.block(o, { dependencyKey: 'repo:42', maxWaitMs: 600_000 })).won).toBe(true);
    const blocked = await mustGet(ledger, c.id);
    expect(blocked).toMatchObject({ state: 'blocked', dependencyKey: 'repo:42', attempt: 0, leaseUntil: null });
    expect(ms(blocked.blockedAt)).toBeGreaterThanOrEqual(before.getTime());
    expect(ms(blocked.blockExpiresAt)).toBeGreaterThanOrEqual(before.getTime() + 600_000);
    expect(ms(blocked.probeAfter)).toBe(ms(blocked.blockExpiresAt)); // no probe interval: probe at expiry
    expect(only(await history(ledger, c.id)).outcome).toBe('blocked');
    expect(await waitRow(ledger, c.id)).toEqual({ queue, dependencyKey: 'repo:42', probeAfter: blocked.probeAfter });
    expect(await claimAll(ledger, queue)).toEqual([]);

    expect(await ledger.wakeDependency('repo:41')).toEqual([]);
    const woken = await ledger.wakeDependency('repo:42', { queue });
    expect(woken).toEqual([{ id: c.id, queue, lane: null }]);
    expect((await mustGet(ledger, o.id)).state).toBe('blocked'); // another queue, not named
    const item = await mustGet(ledger, c.id);
    expect(item).toMatchObject({ state: 'pending', probeAfter: null, blockExpiresAt: null, blockedAt: null });
    expect(await waitRow(ledger, c.id)).toBeUndefined();
    expect((await waitRow(ledger, o.id))?.queue).toBe(otherQueue);
    const again = await claimOne(ledger, queue);
    expect(again.id).toBe(c.id);
    expect(again.attempt).toBe(1);
    // Without a queue filter every queue's waiters wake.
    expect((await ledger.wakeDependency('repo:42')).map((w) => w.id)).toEqual([o.id]);
    expect(await waitRow(ledger, o.id)).toBeUndefined();
  });

  test('probeDependencyWaits: a due probe makes the item pending', async () => {
    const queue = freshQueue('probe');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    expect((await ledger.block(c, { dependencyKey: 'dep-probe', maxWaitMs: 600_000, probeAfterMs: 150 })).won).toBe(true);
    expect((await waitRow(ledger, c.id))?.probeAfter).toEqual((await mustGet(ledger, c.id)).probeAfter);
    expect((await ledger.probeDependencyWaits({ queue })).probed).toEqual([]);
    const probed = await waitFor(
      async () => {
        const r = await ledger.probeDependencyWaits({ queue });
        expect(r.expired).toEqual([]);
        return r.probed.length > 0 ? r.probed : undefined;
      },
      10_000,
      'the dependency probe',
    );
    expect(probed).toEqual([{ id: c.id, queue, lane: null }]);
    const item = await mustGet(ledger, c.id);
    expect(item.state).toBe('pending');
    expect(item.probeAfter).toBeNull();
    expect(await waitRow(ledger, c.id)).toBeUndefined();
    expect((await claimOne(ledger, queue)).id).toBe(c.id);
  });

  // A wait past its maxWait: test/ledger-dependency-race.test.ts (a final run, then dead on a re-block).
  test('a blocked item without a waits row (blocked by code older than schema 3) is found again by the reconciler', async () => {
    const queue = freshQueue('repair-waits');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    await ledger.enqueue({ queue, type: 't', payload: 2 });
    const [a, b] = await claimAll(ledger, queue);
    if (!a || !b) throw new Error('expected two claimed items');
    await ledger.block(a, { dependencyKey: 'old-code', maxWaitMs: 600_000 });
    await ledger.block(b, { dependencyKey: 'old-code', maxWaitMs: 600_000 });
    // What pre-schema-3 code leaves behind: the item blocked, no waits row.
    await sql`DELETE FROM ${ledger.tables.waits} WHERE item_id = ${a.id}`.execute(ledger.db);
    expect((await ledger.wakeDependency('never-woken-key')).length).toBe(0);

    const reconciler = new Reconciler({ ledger, queues: [queue], intervalMs: 3_600_000, retentionMs: 0, log: createLogger('test', 'silent') });
    await reconciler.pass();
    expect((await waitRow(ledger, a.id))?.dependencyKey).toBe('old-code');
    expect(await ledger.repairWaits(queue)).toBe(0); // nothing left to record
    expect((await ledger.wakeDependency('old-code', { queue })).map((w) => w.id).sort()).toEqual([a.id, b.id].sort());
  });
});

describe('reclaimExpired', () => {
  test('an expired lease goes back to pending, counted as an attempt, with history lease_expired', async () => {
    const queue = freshQueue('reclaim');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const held = await ledger.enqueue({ queue: freshQueue('reclaim-held'), type: 't', payload: 2 });
    const c = await claimOne(ledger, queue, 'crashed-worker', 200);
    const h = only(await ledger.claimByIds({ queue: (await mustGet(ledger, held.id)).queue, owner: 'w', leaseMs: 600_000, ids: [held.id] }));
    expect((await ledger.reclaimExpired({ queue })).reclaimed).toEqual([]);
    await expireAndReclaim(queue, [c.id]);
    const item = await mustGet(ledger, c.id);
    expect(item).toMatchObject({ state: 'pending', attempt: 1, failureClass: 'lease_expired', leaseUntil: null });
    expect(only(await history(ledger, c.id))).toMatchObject({
      attempt: 1,
      outcome: 'lease_expired',
      failureClass: 'lease_expired',
      worker: 'crashed-worker',
    });
    const again = await claimOne(ledger, queue, 'worker-b');
    expect(again.attempt).toBe(2);
    // A live lease is never reclaimed.
    expect((await ledger.reclaimExpired()).reclaimed).not.toContain(h.id);
    expect((await mustGet(ledger, h.id)).state).toBe('processing');
  });

  test('with the budget spent the item is dead, class lease_expired, and its lane moves on', async () => {
    const queue = freshQueue('reclaim-dead');
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, lane: 'L', maxAttempts: 1 },
      { queue, type: 't', payload: 2, lane: 'L' },
    ]);
    const c = await claimOne(ledger, queue, 'w', 200);
    expect(c.id).toBe(a!.id);
    const dead = await waitFor(
      async () => {
        const r = await ledger.reclaimExpired({ queue });
        expect(r.reclaimed).toEqual([]);
        return r.dead.length > 0 ? r.dead : undefined;
      },
      10_000,
      'the expired lease to be reclaimed',
    );
    expect(dead).toEqual([a!.id]);
    expect(await mustGet(ledger, a!.id)).toMatchObject({ state: 'dead', failureClass: 'lease_expired' });
    expect(only(await history(ledger, a!.id)).outcome).toBe('lease_expired');
    expect((await claimOne(ledger, queue)).id).toBe(b!.id);
  });
});

describe('cancel', () => {
  test('pending → cancelled and the lane moves on', async () => {
    const queue = freshQueue('cancel');
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, lane: 'L' },
      { queue, type: 't', payload: 2, lane: 'L' },
    ]);
    expect(await ledger.cancel(a!.id, 'not needed')).toBe('cancelled');
    const item = await mustGet(ledger, a!.id);
    expect(item).toMatchObject({ state: 'cancelled', lastError: 'not needed', failureClass: 'cancelled' });
    expect(item.terminalAt).toBeInstanceOf(Date);
    expect((await mustGet(ledger, b!.id)).isHead).toBe(true);
    expect((await claimOne(ledger, queue)).id).toBe(b!.id);
    expect(await laneRow(ledger, queue, 'L')).toEqual({ nextSeq: 2, busy: true });
  });

  test('processing → cancel_requested; completed → not_cancellable; unknown → not_found', async () => {
    const queue = freshQueue('cancel-2');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    expect(await ledger.cancel(c.id)).toBe('cancel_requested');
    expect(await mustGet(ledger, c.id)).toMatchObject({ state: 'processing', cancelRequested: true });
    expect((await ledger.complete(c)).won).toBe(true);
    const before = await mustGet(ledger, c.id);
    expect(await ledger.cancel(c.id)).toBe('not_cancellable');
    expect(await mustGet(ledger, c.id)).toEqual(before);
    expect(await ledger.cancel('nope-not-an-item')).toBe('not_found');
  });

  test('blocked → cancelled', async () => {
    const queue = freshQueue('cancel-blocked');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c = await claimOne(ledger, queue);
    await ledger.block(c, { dependencyKey: 'never', maxWaitMs: 600_000 });
    expect((await waitRow(ledger, c.id))?.dependencyKey).toBe('never');
    expect(await ledger.cancel(c.id)).toBe('cancelled');
    expect((await mustGet(ledger, c.id)).state).toBe('cancelled');
    expect(await waitRow(ledger, c.id)).toBeUndefined();
    expect(await ledger.wakeDependency('never')).toEqual([]);
  });
});

describe('replay', () => {
  async function deadItem(queue: string, lane?: string): Promise<WorkItem> {
    await ledger.enqueue({ queue, type: 'sync', payload: { repo: 7 }, priority: 3, queueClass: 'bulk', maxAttempts: 4, ...(lane ? { lane } : {}) });
    const c = await claimOne(ledger, queue);
    await ledger.retry(c, { error: 'first', delayMs: 0 });
    const c2 = await claimOne(ledger, queue);
    await ledger.fail(c2, { error: 'fatal: gone' });
    return mustGet(ledger, c.id);
  }

  test('a new item with replayOf; the original gets replayedAt; a second replay is refused', async () => {
    const queue = freshQueue('replay');
    const dead = await deadItem(queue, 'L');
    expect(dead).toMatchObject({ state: 'dead', attempt: 2, lastError: 'fatal: gone' });
    const r = await ledger.replay(dead.id, { expectAttempt: 2, expectErrorDigest: errorDigest(dead.lastError) });
    expect(r.id).not.toBe(dead.id);
    const fresh = await mustGet(ledger, r.id);
    expect(fresh).toMatchObject({
      queue,
      type: 'sync',
      payload: { repo: 7 },
      priority: 3,
      queueClass: 'bulk',
      maxAttempts: 4,
      lane: 'L',
      laneSeq: 2,
      isHead: true,
      state: 'pending',
      attempt: 0,
      replayOf: dead.id,
      lastError: null,
    });
    const original = await mustGet(ledger, dead.id);
    expect(original.replayedAt).toBeInstanceOf(Date);
    expect(original.state).toBe('dead');
    expect((await history(ledger, dead.id)).length).toBe(2); // the original's history stays
    expect((await claimOne(ledger, queue)).id).toBe(r.id);

    const count = await itemCount(ledger, queue);
    const err = await ledger.replay(dead.id, { expectAttempt: 2, expectErrorDigest: errorDigest(dead.lastError) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReplayRejectedError);
    expect((err as ReplayRejectedError).reason).toBe('already_replayed');
    expect(await itemCount(ledger, queue)).toBe(count);
  });

  test('the guard rejects a wrong attempt or error digest and writes nothing', async () => {
    const queue = freshQueue('replay-guard');
    const dead = await deadItem(queue);
    const count = await itemCount(ledger, queue);
    const lanes = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${ledger.tables.lanes}`.execute(ledger.db);

    const wrongAttempt = await ledger.replay(dead.id, { expectAttempt: 1, expectErrorDigest: errorDigest(dead.lastError) }).catch((e: unknown) => e);
    expect(wrongAttempt).toBeInstanceOf(ReplayRejectedError);
    expect((wrongAttempt as ReplayRejectedError).reason).toBe('attempt_mismatch');

    const wrongDigest = await ledger.replay(dead.id, { expectAttempt: 2, expectErrorDigest: errorDigest('first') }).catch((e: unknown) => e);
    expect(wrongDigest).toBeInstanceOf(ReplayRejectedError);
    expect((wrongDigest as ReplayRejectedError).reason).toBe('error_mismatch');

    expect(await itemCount(ledger, queue)).toBe(count);
    expect(await mustGet(ledger, dead.id)).toEqual(dead);
    const lanesAfter = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${ledger.tables.lanes}`.execute(ledger.db);
    expect(Number(lanesAfter.rows[0]?.n)).toBe(Number(lanes.rows[0]?.n));

    // With the right guard it goes through.
    const r = await ledger.replay(dead.id, { expectAttempt: 2, expectErrorDigest: errorDigest(dead.lastError) });
    expect((await mustGet(ledger, r.id)).replayOf).toBe(dead.id);
  });

  test('only dead or cancelled items can be replayed', async () => {
    const queue = freshQueue('replay-state');
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1 },
      { queue, type: 't', payload: 2 },
    ]);
    const c = only(await ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids: [a!.id] }));
    await ledger.complete(c);
    const done = await mustGet(ledger, a!.id);
    const err = await ledger.replay(done.id, { expectAttempt: 1, expectErrorDigest: errorDigest(null) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReplayRejectedError);
    expect((err as ReplayRejectedError).reason).toBe('not_replayable_state');
    const missing = await ledger.replay('no-such-item', { expectAttempt: 0, expectErrorDigest: errorDigest(null) }).catch((e: unknown) => e);
    expect((missing as ReplayRejectedError).reason).toBe('not_found');

    expect(await ledger.cancel(b!.id, 'oops')).toBe('cancelled');
    const r = await ledger.replay(b!.id, { expectAttempt: 0, expectErrorDigest: errorDigest('oops') });
    expect(await mustGet(ledger, r.id)).toMatchObject({ state: 'pending', payload: 2, replayOf: b!.id });
  });
});

describe('purge', () => {
  test('terminal items older than the retention go, with their history; younger and unfinished stay', async () => {
    const queue = freshQueue('purge');
    const [oldDone, oldDead, young, pending, running, youngRetried] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, lane: 'gone' },
      { queue, type: 't', payload: 2 },
      { queue, type: 't', payload: 3 },
      { queue, type: 't', payload: 4, delayMs: 3_600_000 },
      { queue, type: 't', payload: 5 },
      { queue, type: 't', payload: 7, lane: 'kept' },
    ]);
    const otherQueue = freshQueue('purge-other');
    const other = await ledger.enqueue({ queue: otherQueue, type: 't', payload: 6 });
    const claimed = await claimAll(ledger, queue);
    expect(claimed).toHaveLength(5);
    const byId = new Map(claimed.map((c) => [c.id, c]));
    for (const id of [oldDone!.id, youngRetried!.id]) {
      await ledger.retry(byId.get(id)!, { error: 'again', delayMs: 0 });
      await ledger.complete(only(await ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids: [id] })));
    }
    await ledger.fail(byId.get(oldDead!.id)!, { error: 'x' });
    await ledger.complete(byId.get(young!.id)!);
    await ledger.complete(only(await claimAll(ledger, otherQueue)));
    expect(await historyCount(ledger, oldDone!.id)).toBe(2);
    expect(await historyCount(ledger, youngRetried!.id)).toBe(2);

    // Age two of them past the retention (the ledger cannot be made to wait an hour):
    // created three hours ago, ended two hours ago.
    const old = [oldDone!.id, oldDead!.id, other.id];
    await sql`UPDATE ${ledger.tables.items} SET created_at = NOW(6) - INTERVAL 3 HOUR, terminal_at = NOW(6) - INTERVAL 2 HOUR
      WHERE id IN (${sql.join(old)})`.execute(ledger.db);
    // Old but unfinished, and old but ended within the retention: they stay.
    await sql`UPDATE ${ledger.tables.items} SET created_at = NOW(6) - INTERVAL 3 HOUR
      WHERE id IN (${sql.join([pending!.id, running!.id, young!.id])})`.execute(ledger.db);

    expect(await ledger.purge({ olderThanMs: 3_600_000, queue })).toBe(2);
    expect(await ledger.get(oldDone!.id)).toBeUndefined();
    expect(await ledger.get(oldDead!.id)).toBeUndefined();
    expect(await historyCount(ledger, oldDone!.id)).toBe(0);
    expect(await historyCount(ledger, oldDead!.id)).toBe(0);
    expect(await laneRow(ledger, queue, 'gone')).toBeUndefined();
    expect((await mustGet(ledger, young!.id)).state).toBe('completed');
    expect((await mustGet(ledger, youngRetried!.id)).state).toBe('completed');
    expect(await historyCount(ledger, youngRetried!.id)).toBe(2);
    expect(await laneRow(ledger, queue, 'kept')).toEqual({ nextSeq: 1, busy: false });
    expect((await mustGet(ledger, pending!.id)).state).toBe('pending');
    expect((await mustGet(ledger, running!.id)).state).toBe('processing');
    expect((await mustGet(ledger, other.id)).state).toBe('completed'); // another queue: not named
    expect(await ledger.purge({ olderThanMs: 3_600_000, queue })).toBe(0);
    expect(await ledger.purge({ olderThanMs: 3_600_000 })).toBe(1);
    expect(await ledger.get(other.id)).toBeUndefined();
  });

  test('a purged lane starts again and its new item is the head', async () => {
    const queue = freshQueue('purge-lane');
    const first = await ledger.enqueue({ queue, type: 't', payload: 1, lane: 'L' });
    await ledger.complete(await claimOne(ledger, queue));
    await sql`UPDATE ${ledger.tables.items} SET created_at = NOW(6) - INTERVAL 2 DAY, terminal_at = NOW(6) - INTERVAL 1 DAY
      WHERE id = ${first.id}`.execute(ledger.db);
    expect(await ledger.purge({ olderThanMs: 60_000, queue })).toBe(1);
    const again = await ledger.enqueue({ queue, type: 't', payload: 2, lane: 'L' });
    expect((await mustGet(ledger, again.id)).isHead).toBe(true);
    expect((await claimOne(ledger, queue)).id).toBe(again.id);
  });
});

describe('stats and inspect', () => {
  test('counts by state and the age of the oldest due head', async () => {
    const queue = freshQueue('stats');
    const now = await ledger.now();
    await ledger.enqueueMany([
      { queue, type: 't', payload: 'done' },
      { queue, type: 't', payload: 'dead' },
      { queue, type: 't', payload: 'skip' },
      { queue, type: 't', payload: 'block' },
      { queue, type: 't', payload: 'run' },
    ]);
    for (const c of await claimAll(ledger, queue)) {
      if (c.payload === 'done') await ledger.complete(c);
      if (c.payload === 'dead') await ledger.fail(c, { error: 'x' });
      if (c.payload === 'skip') await ledger.skip(c);
      if (c.payload === 'block') await ledger.block(c, { dependencyKey: 'stats-dep', maxWaitMs: 600_000 });
    }
    const cancelled = await ledger.enqueue({ queue, type: 't', payload: 'cancel' });
    await ledger.cancel(cancelled.id);
    await ledger.enqueueMany([
      { queue, type: 't', payload: 'old', runAt: new Date(now.getTime() - 60_000) },
      { queue, type: 't', payload: 'future', delayMs: 3_600_000 },
    ]);
    const after = await ledger.now();
    const [s] = await ledger.stats(queue);
    expect(s).toBeDefined();
    expect(s!.queue).toBe(queue);
    expect(s!.counts).toEqual({ pending: 2, processing: 1, blocked: 1, completed: 1, skipped: 1, dead: 1, cancelled: 1 });
    expect(s!.oldestDueAgeMs).toBeGreaterThanOrEqual(60_000);
    expect(s!.oldestDueAgeMs).toBeLessThan(60_000 + (after.getTime() - now.getTime()) + 5_000);

    const all = await ledger.stats();
    expect(all.map((x) => x.queue)).toContain(queue);
    expect(all.map((x) => x.queue)).toEqual([...all.map((x) => x.queue)].sort());
    const empty = freshQueue('stats-empty');
    expect(await ledger.stats(empty)).toEqual([]);
  });

  test('oldestDueAgeMs is 0 when nothing due waits', async () => {
    const queue = freshQueue('stats-zero');
    await ledger.enqueue({ queue, type: 't', payload: 1, delayMs: 3_600_000 });
    const [s] = await ledger.stats(queue);
    expect(s!.counts.pending).toBe(1);
    expect(s!.oldestDueAgeMs).toBe(0);
  });

  test('inspect: the item and its attempt history in order', async () => {
    const queue = freshQueue('inspect');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    const c1 = await claimOne(ledger, queue, 'w1');
    await ledger.retry(c1, { error: 'e1', delayMs: 0 });
    const c2 = await claimOne(ledger, queue, 'w2');
    await ledger.release(c2, { reason: 'drain' });
    const c3 = await claimOne(ledger, queue, 'w3');
    await ledger.fail(c3, { error: 'e3', failureClass: 'bad_input' });
    const r = await ledger.inspect(c1.id);
    expect(r?.item).toEqual(await mustGet(ledger, c1.id));
    expect(r?.attempts.map((a) => [a.attempt, a.outcome, a.worker, a.failureClass])).toEqual([
      [1, 'retried', 'w1', 'error'],
      [2, 'released', 'w2', null],
      [2, 'dead', 'w3', 'bad_input'],
    ]);
    expect(await ledger.inspect('not-there')).toBeUndefined();
  });
});

describe('ownership epochs', () => {
  test('activate takes the next epoch; expectEpoch is a CAS', async () => {
    const queue = freshQueue('own');
    expect(await ledger.ownership(queue)).toBeUndefined();
    const e1 = await ledger.activate({ queue, deployment: 'blue', expectEpoch: 0 });
    expect(e1).toMatchObject({ queue, deployment: 'blue', epoch: 1 });
    const e2 = await ledger.activate({ queue, deployment: 'green' });
    expect(e2).toMatchObject({ deployment: 'green', epoch: 2 });
    const e3 = await ledger.activate({ queue, deployment: 'blue', expectEpoch: 2 });
    expect(e3).toMatchObject({ deployment: 'blue', epoch: 3 });

    const stale = await ledger.activate({ queue, deployment: 'red', expectEpoch: 2 }).catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(OwnershipConflictError);
    expect(stale).toMatchObject({ expectedEpoch: 2, actualEpoch: 3 });
    const fresh = await ledger.activate({ queue, deployment: 'red', expectEpoch: 0 }).catch((e: unknown) => e);
    expect(fresh).toMatchObject({ name: 'OwnershipConflictError', expectedEpoch: 0, actualEpoch: 3 });
    expect(await ledger.ownership(queue)).toMatchObject({ deployment: 'blue', epoch: 3 });

    const neverActivated = freshQueue('own-never');
    const missing = await ledger.activate({ queue: neverActivated, deployment: 'x', expectEpoch: 4 }).catch((e: unknown) => e);
    expect(missing).toMatchObject({ name: 'OwnershipConflictError', actualEpoch: 0 });
    expect(await ledger.ownership(neverActivated)).toBeUndefined();
  });

  test('a claim under a stale epoch gets nothing; the current epoch claims and is recorded', async () => {
    const queue = freshQueue('own-claim');
    await ledger.activate({ queue, deployment: 'a' });
    await ledger.activate({ queue, deployment: 'b' });
    const [x, y] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1 },
      { queue, type: 't', payload: 2 },
    ]);
    expect((await ledger.claim({ queue, owner: 'old', limit: 10, leaseMs: 60_000, epoch: 1 })).items).toEqual([]);
    expect(await ledger.claimByIds({ queue, owner: 'old', leaseMs: 60_000, ids: [x!.id], epoch: 1 })).toEqual([]);
    expect((await ledger.claim({ queue, owner: 'future', limit: 10, leaseMs: 60_000, epoch: 3 })).items).toEqual([]);
    expect((await mustGet(ledger, x!.id)).state).toBe('pending');
    const got = only(await ledger.claimByIds({ queue, owner: 'new', leaseMs: 60_000, ids: [x!.id], epoch: 2 }));
    expect(got.epoch).toBe(2);
    const rest = await ledger.claim({ queue, owner: 'new', limit: 10, leaseMs: 60_000, epoch: 2 });
    expect(rest.items.map((i) => [i.id, i.epoch])).toEqual([[y!.id, 2]]);
    // A queue that was never activated has no valid epoch.
    const bare = freshQueue('own-bare');
    await ledger.enqueue({ queue: bare, type: 't', payload: 1 });
    expect((await ledger.claim({ queue: bare, owner: 'w', limit: 10, leaseMs: 60_000, epoch: 1 })).items).toEqual([]);
  });
});

describe('batch, in-transaction and cancelled finalizes', () => {
  test('completeMany: each entry is its own CAS; a stale one loses alone and lanes advance', async () => {
    const queue = freshQueue('complete-many');
    const r = await ledger.enqueueMany([
      { queue, type: 't', payload: 'a1', lane: 'A' },
      { queue, type: 't', payload: 'a2', lane: 'A' },
      { queue, type: 't', payload: 'b1', lane: 'B' },
      { queue, type: 't', payload: 'b2', lane: 'B' },
      { queue, type: 't', payload: 'solo' },
    ]);
    const claimed = await claimAll(ledger, queue);
    expect(claimed.map((c) => c.payload).sort()).toEqual(['a1', 'b1', 'solo']);
    const byPayload = new Map(claimed.map((c) => [c.payload as string, c]));
    const stale = withForeignToken(byPayload.get('b1')!);
    const beforeB1 = await mustGet(ledger, stale.id);
    const res = await ledger.completeMany([
      { handle: byPayload.get('a1')!, result: { n: 1 } },
      { handle: stale, result: { n: 2 } },
      { handle: byPayload.get('solo')! },
    ]);
    // The stale entry sends the batch down the one-by-one path, which cannot tell whether a lane
    // got a new head: a winner says it may have.
    expect(res).toEqual([
      { won: true, state: 'completed', laneAdvanced: true },
      { won: false, state: 'completed', laneAdvanced: false },
      { won: true, state: 'completed' },
    ]);
    expect((await mustGet(ledger, byPayload.get('a1')!.id)).result).toEqual({ n: 1 });
    expect(await mustGet(ledger, stale.id)).toEqual(beforeB1);
    expect((await mustGet(ledger, r[1]!.id)).isHead).toBe(true);
    expect((await mustGet(ledger, r[3]!.id)).isHead).toBe(false);
    expect(await laneRow(ledger, queue, 'A')).toEqual({ nextSeq: 2, busy: true });
    expect(await laneRow(ledger, queue, 'B')).toEqual({ nextSeq: 2, busy: true });
    const next = await claimAll(ledger, queue);
    expect(next.map((c) => c.payload)).toEqual(['a2']);
    // All entries stale: all lose, nothing written.
    const again = await ledger.completeMany([{ handle: byPayload.get('a1')! }, { handle: byPayload.get('solo')! }]);
    expect(again.map((x) => x.won)).toEqual([false, false]);
    expect(await laneRow(ledger, queue, 'A')).toEqual({ nextSeq: 2, busy: true });
    // A batch says which lanes got a new head: A has nothing left, B hands over to b2.
    const ends = await ledger.completeMany([{ handle: next[0]! }, { handle: byPayload.get('b1')! }]);
    expect(ends).toEqual([
      { won: true, state: 'completed', laneAdvanced: false },
      { won: true, state: 'completed', laneAdvanced: true },
    ]);
    expect(await laneRow(ledger, queue, 'A')).toEqual({ nextSeq: 2, busy: false });
    expect((await claimAll(ledger, queue)).map((c) => c.payload)).toEqual(['b2']);
  });

  test('completeInTransaction: the completion commits with the caller’s writes, or the loss rolls them back', async () => {
    const queue = freshQueue('complete-trx');
    await sql`CREATE TABLE IF NOT EXISTS app_effects (item_id VARCHAR(32) PRIMARY KEY) ENGINE=InnoDB`.execute(ledger.db);
    const effects = async (id: string): Promise<number> => {
      const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM app_effects WHERE item_id = ${id}`.execute(ledger.db);
      return Number(r.rows[0]?.n);
    };
    await ledger.enqueueMany([
      { queue, type: 't', payload: 1, lane: 'L' },
      { queue, type: 't', payload: 2 },
    ]);
    const [first, second] = await claimAll(ledger, queue);
    await ledger.db.transaction().execute(async (trx) => {
      await sql`INSERT INTO app_effects (item_id) VALUES (${first!.id})`.execute(trx);
      await ledger.completeInTransaction(trx, first!, { ok: 1 });
    });
    expect(await mustGet(ledger, first!.id)).toMatchObject({ state: 'completed', result: { ok: 1 } });
    expect(await effects(first!.id)).toBe(1);

    const before = await mustGet(ledger, second!.id);
    const err = await ledger.db
      .transaction()
      .execute(async (trx) => {
        await sql`INSERT INTO app_effects (item_id) VALUES (${second!.id})`.execute(trx);
        await ledger.completeInTransaction(trx, withForeignToken(second!), { ok: 2 });
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LeaseLostError);
    expect(await effects(second!.id)).toBe(0);
    expect(await mustGet(ledger, second!.id)).toEqual(before);
  });

  test('completeWithin says whether the lane got a new head: true with a successor waiting, false when the lane goes idle', async () => {
    const queue = freshQueue('complete-within-lane');
    await ledger.enqueueMany([
      { queue, type: 't', payload: 'a1', lane: 'A' },
      { queue, type: 't', payload: 'a2', lane: 'A' },
      { queue, type: 't', payload: 'b1', lane: 'B' },
      { queue, type: 't', payload: 'free' },
    ]);
    const byPayload = new Map((await claimAll(ledger, queue)).map((c) => [c.payload, c]));
    const done = (p: string) => ledger.completeWithin(byPayload.get(p)!, async () => `done ${p}`);
    expect(await done('a1')).toEqual({ value: 'done a1', laneAdvanced: true });
    expect(await done('b1')).toEqual({ value: 'done b1', laneAdvanced: false });
    expect(await done('free')).toEqual({ value: 'done free', laneAdvanced: undefined });
    expect(await laneRow(ledger, queue, 'A')).toEqual({ nextSeq: 2, busy: true });
    expect(await laneRow(ledger, queue, 'B')).toEqual({ nextSeq: 1, busy: false });
    expect((await claimAll(ledger, queue)).map((c) => c.payload)).toEqual(['a2']);
  });

  test('cancelClaimed: the holder ends a cancel-requested item as cancelled and its lane moves on', async () => {
    const queue = freshQueue('cancel-claimed');
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, lane: 'L' },
      { queue, type: 't', payload: 2, lane: 'L' },
    ]);
    const c = await claimOne(ledger, queue, 'holder');
    expect(c.id).toBe(a!.id);
    expect(await ledger.cancel(c.id)).toBe('cancel_requested');
    expect((await ledger.renew(c, 60_000)).cancelRequested).toBe(true);
    expect(await ledger.cancelClaimed(c, 'operator asked')).toEqual({ won: true, state: 'cancelled' });
    expect(await mustGet(ledger, c.id)).toMatchObject({ state: 'cancelled', failureClass: 'cancelled', lastError: 'operator asked' });
    expect(only(await history(ledger, c.id))).toMatchObject({ outcome: 'cancelled', worker: 'holder' });
    expect((await claimOne(ledger, queue)).id).toBe(b!.id);
  });
});

// ---------------------------------------------------------------------------
// The losing side of every CAS: a finalize that lost must report it and write nothing.

type Op = (handle: ClaimedItem) => Promise<boolean>;
const OPS: Record<string, Op> = {
  complete: async (h) => (await ledger.complete(h, { stale: true })).won,
  retry: async (h) => (await ledger.retry(h, { error: 'stale holder', delayMs: 0 })).won,
  fail: async (h) => (await ledger.fail(h, { error: 'stale holder' })).won,
  release: async (h) => (await ledger.release(h)).won,
  skip: async (h) => (await ledger.skip(h, 'stale')).won,
  block: async (h) => (await ledger.block(h, { dependencyKey: 'stale-dep', maxWaitMs: 60_000 })).won,
  checkpoint: (h) => ledger.checkpoint(h, { stale: true }),
  renew: async (h) => (await ledger.renew(h, 600_000)).renewed,
  cancelClaimed: async (h) => (await ledger.cancelClaimed(h, 'stale')).won,
  completeMany: async (h) => {
    const r = await ledger.completeMany([{ handle: h, result: 'stale' }]);
    return only(r).won;
  },
  completeInTransaction: async (h) => {
    try {
      await ledger.db.transaction().execute((trx) => ledger.completeInTransaction(trx, h, 'stale'));
      return true;
    } catch (error) {
      if (error instanceof LeaseLostError) return false;
      throw error;
    }
  },
};
const OP_NAMES = Object.keys(OPS);

interface Snapshot {
  item: WorkItem | undefined;
  successor: WorkItem | undefined;
  history: number;
  lane: { nextSeq: number; busy: boolean } | undefined;
}

async function snapshot(id: string, successorId: string, queue: string): Promise<Snapshot> {
  return {
    item: await ledger.get(id),
    successor: await ledger.get(successorId),
    history: await historyCount(ledger, id),
    lane: await laneRow(ledger, queue, 'L'),
  };
}

/** Runs `op` as the loser and checks it reported the loss and changed nothing. */
async function expectLoses(name: string, handle: ClaimedItem, successorId: string): Promise<void> {
  const op = OPS[name];
  if (!op) throw new Error(`no op ${name}`);
  const before = await snapshot(handle.id, successorId, handle.queue);
  expect(await op(handle)).toBe(false);
  const after = await snapshot(handle.id, successorId, handle.queue);
  expect(after).toEqual(before);
  expect(after.successor?.isHead).toBe(false);
}

describe('losing the CAS writes nothing', () => {
  /** One lane per case: the item under test, then a successor that must not become head. */
  async function laneWithSuccessor(queue: string): Promise<{ head: string; successor: string }> {
    const [a, b] = await ledger.enqueueMany([
      { queue, type: 't', payload: 'head', lane: 'L' },
      { queue, type: 't', payload: 'successor', lane: 'L' },
    ]);
    return { head: a!.id, successor: b!.id };
  }

  test.each(OP_NAMES)('%s with a stale lease token', async (name) => {
    const queue = freshQueue(`lose-token-${name}`);
    const { head, successor } = await laneWithSuccessor(queue);
    const c = await claimOne(ledger, queue);
    expect(c.id).toBe(head);
    await expectLoses(name, withForeignToken(c), successor);
    // The real holder still wins afterwards.
    expect((await ledger.complete(c)).won).toBe(true);
    expect((await mustGet(ledger, successor)).isHead).toBe(true);
  });

  test.each(OP_NAMES)('%s on an item already completed', async (name) => {
    const queue = freshQueue(`lose-state-${name}`);
    const { successor } = await laneWithSuccessor(queue);
    const c = await claimOne(ledger, queue);
    expect((await ledger.complete(c, 'first')).won).toBe(true);
    // The successor is the head now; the late finalize must not touch either row.
    const before = await snapshot(c.id, successor, queue);
    const op = OPS[name]!;
    expect(await op(c)).toBe(false);
    expect(await snapshot(c.id, successor, queue)).toEqual(before);
    expect((await mustGet(ledger, c.id)).result).toBe('first');
  });

  describe('after the lease expired and another owner re-claimed the item', () => {
    const stale = new Map<string, { handle: ClaimedItem; successor: string; queue: string }>();

    beforeAll(async () => {
      const queue = freshQueue('lose-expired');
      const lanes: { name: string; head: string; successor: string }[] = [];
      for (const name of OP_NAMES) {
        const [a, b] = await ledger.enqueueMany([
          { queue, type: 't', payload: 'head', lane: `L-${name}` },
          { queue, type: 't', payload: 'successor', lane: `L-${name}` },
        ]);
        lanes.push({ name, head: a!.id, successor: b!.id });
      }
      const first = await ledger.claim({ queue, owner: 'owner-a', limit: 100, leaseMs: 200 });
      expect(first.items).toHaveLength(OP_NAMES.length);
      await expireAndReclaim(
        queue,
        first.items.map((i) => i.id),
      );
      const second = await ledger.claimByIds({ queue, owner: 'owner-b', leaseMs: 600_000, ids: first.items.map((i) => i.id) });
      expect(second).toHaveLength(OP_NAMES.length);
      for (const l of lanes) {
        const handle = first.items.find((i) => i.id === l.head);
        if (!handle) throw new Error('claimed head missing');
        stale.set(l.name, { handle, successor: l.successor, queue });
      }
    });

    test.each(OP_NAMES)('%s by the first owner', async (name) => {
      const s = stale.get(name);
      if (!s) throw new Error(`no setup for ${name}`);
      const before = await snapshot(s.handle.id, s.successor, s.queue);
      expect(before.item).toMatchObject({ state: 'processing', leaseOwner: 'owner-b', attempt: 2 });
      expect(await OPS[name]!(s.handle)).toBe(false);
      const after = await snapshot(s.handle.id, s.successor, s.queue);
      expect(after).toEqual(before);
      expect(after.successor?.isHead).toBe(false);
    });
  });

  test('a holder whose item was reclaimed but not yet re-claimed also loses', async () => {
    const queue = freshQueue('lose-reclaimed');
    const { successor } = await laneWithSuccessor(queue);
    const c = await claimOne(ledger, queue, 'w', 200);
    await expireAndReclaim(queue, [c.id]);
    for (const name of OP_NAMES) await expectLoses(name, c, successor);
    expect((await mustGet(ledger, c.id)).state).toBe('pending');
  });
});
