// The ledger's transitions: enqueue (defaults, batches, due times, priority, claim filters) and idempotency keys.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import { claimAll, claimOne, freshQueue, itemCount, laneRow, ms, mustGet, only } from './support/items.js';
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
    for (let k = 0; k < 3; k++)
      order.push(only((await ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 60_000 })).items).priority);
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
    const interactiveC = await ledger.claim({
      queue,
      owner: 'w',
      limit: 10,
      leaseMs: 60_000,
      classes: ['interactive'],
      types: ['c'],
    });
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
    const second = await ledger.enqueue({
      queue,
      type: 't',
      payload: { v: 1 },
      lane: 'L',
      idempotencyKey: 'order-1',
      priority: 3,
    });
    expect(first.duplicate).toBe(false);
    expect(second).toEqual({ id: first.id, duplicate: true, laneSeq: 1 });
    expect(await itemCount(ledger, queue)).toBe(1);
    expect((await mustGet(ledger, first.id)).payload).toEqual({ v: 1 });
    expect(await laneRow(ledger, queue, 'L')).toEqual({ nextSeq: 1, busy: true });
    // Still a duplicate after the first has finished.
    const c = await claimOne(ledger, queue);
    expect((await ledger.complete(c)).won).toBe(true);
    expect(
      await ledger.enqueue({ queue, type: 't', payload: { v: 1 }, lane: 'L', idempotencyKey: 'order-1' }),
    ).toMatchObject({ id: first.id, duplicate: true });
    // The key is unique per queue, not globally.
    const other = await ledger.enqueue({
      queue: freshQueue('idem-other'),
      type: 't',
      payload: 1,
      idempotencyKey: 'order-1',
    });
    expect(other.duplicate).toBe(false);
    expect(other.id).not.toBe(first.id);
  });

  test('duplicate inside one batch', async () => {
    const queue = freshQueue('idem-batch');
    const r = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, idempotencyKey: 'k1', lane: 'L' },
      { queue, type: 't', payload: 1, idempotencyKey: 'k1', lane: 'L' },
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
