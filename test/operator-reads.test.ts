import { expect, test } from 'vitest';
import { ValidationError } from '../src/errors.js';
import { errorDigest } from '../src/ledger/ids.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { BROWSE_WINDOW } from '../src/ledger/sql/operator/browse-items.js';
import type { ItemFilter, ItemSummary } from '../src/ledger/operator-types.js';
import { claimAll, freshQueue } from './support/items.js';
import { testScope } from './support/scope.js';

const scope = testScope();

/** Every page of a filter, following `next` until null. */
async function allPages(
  ledger: Ledger,
  filter: ItemFilter,
  limit: number,
): Promise<{ ids: string[]; pages: number; shortPages: number }> {
  const ids: string[] = [];
  let pages = 0;
  let shortPages = 0;
  for (let after: string | undefined; ; ) {
    const page = await ledger.operator.items(filter, { after, limit });
    pages++;
    if (page.items.length < limit && page.next !== null) shortPages++;
    ids.push(...page.items.map((i) => i.id));
    if (page.next === null) return { ids, pages, shortPages };
    after = page.next;
  }
}

/** Makes `n` items of the queue dead with error `error` (claimed, then failed). */
async function killAll(ledger: Ledger, queue: string, error = 'boom'): Promise<void> {
  for (const item of await claimAll(ledger, queue)) await ledger.fail(item, { error: new Error(error) });
}

test('item pages: newest first across pages, with and without filters, one item by id or idempotency key', async () => {
  const { ledger } = await scope.ledger();
  const queue = freshQueue('ops');
  const other = freshQueue('ops');
  const made: string[] = [];
  for (let i = 0; i < 23; i++) {
    const r = await ledger.enqueue({ queue, type: i % 3 === 0 ? 'a' : 'b', payload: { i }, idempotencyKey: `k${i}` });
    made.push(r.id);
  }
  await ledger.enqueue({ queue: other, type: 'a', payload: {} });
  const newestFirst = [...made].reverse();

  const all = await allPages(ledger, { queue }, 5);
  expect(all.ids).toEqual(newestFirst);
  expect(all.pages).toBe(5);

  const typeA = await allPages(ledger, { queue, type: 'a' }, 3);
  expect(typeA.ids).toEqual(newestFirst.filter((_, k) => (22 - k) % 3 === 0));

  const byId = await ledger.operator.items({ queue, id: made[4] });
  expect(byId.items.map((i) => i.id)).toEqual([made[4]]);
  expect(byId.next).toBeNull();
  const byKey = await ledger.operator.items({ queue, idempotencyKey: 'k7' });
  expect(byKey.items.map((i) => i.id)).toEqual([made[7]]);
  expect((await ledger.operator.items({ queue: other, id: made[4] })).items).toEqual([]);

  const first = (await ledger.operator.items({ queue }, { limit: 1 })).items[0] as ItemSummary;
  expect(first).toMatchObject({
    id: made[22],
    queue,
    type: 'b',
    state: 'pending',
    attempt: 0,
    errorDigest: errorDigest(null),
    idempotencyKey: 'k22',
  });
  expect(first).not.toHaveProperty('payload');
});

test('item pages by state read a bounded window: a short page goes on, and every match is found once', async () => {
  const { ledger } = await scope.ledger();
  const queue = freshQueue('ops');
  await ledger.enqueue({ queue, type: 't', payload: {} });
  await killAll(ledger, queue, 'x'.repeat(400));
  // More than a window of newer pending items between the dead one and the newest.
  await ledger.enqueueMany(Array.from({ length: BROWSE_WINDOW + 10 }, () => ({ queue, type: 't', payload: {} })));
  const dead = await allPages(ledger, { queue, state: 'dead' }, 10);
  expect(dead.ids).toHaveLength(1);
  expect(dead.shortPages).toBeGreaterThan(0);
  const item = await ledger.get(dead.ids[0] ?? '');
  const summary = (await ledger.operator.items({ queue, id: dead.ids[0] })).items[0];
  expect(summary?.lastError).toHaveLength(300);
  expect(summary?.errorDigest).toBe(errorDigest(item?.lastError ?? null));
});

test('lanes: longest waiting first, with pending counts; lane pages in lane order; items by lane', async () => {
  const { ledger } = await scope.ledger();
  const queue = freshQueue('ops');
  for (let i = 0; i < 3; i++) await ledger.enqueue({ queue, type: 't', payload: {}, lane: 'first' });
  await ledger.enqueue({ queue, type: 't', payload: {}, lane: 'second' });
  await ledger.enqueue({ queue, type: 't', payload: {} });
  const lanes = await ledger.operator.lanes(queue);
  expect(lanes.map((l) => [l.lane, l.pending, l.headState])).toEqual([
    ['first', 3, 'pending'],
    ['second', 1, 'pending'],
  ]);
  const p1 = await ledger.operator.laneItems(queue, 'first', { limit: 2 });
  expect(p1.items.map((i) => [i.laneSeq, i.isHead])).toEqual([
    [1, true],
    [2, false],
  ]);
  const p2 = await ledger.operator.laneItems(queue, 'first', { after: p1.next ?? '', limit: 2 });
  expect(p2.items.map((i) => i.laneSeq)).toEqual([3]);
  expect(p2.next).toBeNull();
  const byLane = await allPages(ledger, { queue, lane: 'first' }, 2);
  expect(byLane.ids).toEqual([...p1.items, ...p2.items].map((i) => i.id).reverse());
  expect(lanes[0]?.headId).toBe(p1.items[0]?.id);
});

test('dead groups, bulk replay (dry run, then guarded, in batches) and bulk purge', async () => {
  const { ledger } = await scope.ledger();
  const queue = freshQueue('ops');
  await ledger.enqueueMany(Array.from({ length: 5 }, () => ({ queue, type: 'a', payload: {} })));
  await ledger.enqueue({ queue, type: 'b', payload: {} });
  await killAll(ledger, queue);
  const groups = await ledger.operator.deadGroups(queue);
  expect(groups.map((g) => [g.type, g.failureClass, g.count]).sort()).toEqual([
    ['a', 'permanent', 5],
    ['b', 'permanent', 1],
  ]);
  expect(groups[0]?.lastError).toContain('boom');

  expect(await ledger.operator.countReplayable({ queue, type: 'a' })).toBe(5);
  const created: string[] = [];
  const r = await ledger.operator.replayDead(
    { queue, type: 'a' },
    async (batch) => void created.push(...batch.map((c) => c.id)),
  );
  expect(r).toEqual({ replayed: 5, skipped: 0 });
  expect(created).toHaveLength(5);
  expect(await ledger.operator.countReplayable({ queue, type: 'a' })).toBe(0);
  expect(await ledger.operator.replayDead({ queue, type: 'a' })).toEqual({ replayed: 0, skipped: 0 });

  expect(await ledger.operator.countPurgeable({ queue, state: 'dead', type: 'b' })).toBe(1);
  expect(await ledger.operator.countPurgeable({ queue, state: 'dead', olderThanMs: 3_600_000 })).toBe(0);
  expect(await ledger.operator.purge({ queue, state: 'dead', type: 'b' })).toBe(1);
  expect(await ledger.operator.countPurgeable({ queue, state: 'dead' })).toBe(5);
  expect((await ledger.operator.deadGroups(queue)).map((g) => g.type)).toEqual(['a']);
});

test('a queue view: counts, due, paused, its last hour', async () => {
  const { ledger } = await scope.ledger();
  const queue = freshQueue('ops');
  await ledger.enqueue({ queue, type: 't', payload: {} });
  await ledger.enqueue({ queue, type: 't', payload: {}, delayMs: 3_600_000 });
  const [done] = await claimAll(ledger, queue);
  if (done) await ledger.complete(done);
  await ledger.pause(queue);
  const [view] = await ledger.operator.queues(queue);
  expect(view).toMatchObject({
    queue,
    due: { count: 0, atLeast: false },
    scheduled: { count: 1, atLeast: false },
    paused: true,
    consumers: [],
  });
  expect(view?.series.points).toHaveLength(60);
  expect(view?.series.bucketMs).toBe(60_000);
  const last = view?.series.points.at(-1);
  expect(last?.completed).toBe(1);
  expect(last?.startP50Ms).not.toBeNull();
});

test('bad input names its field and reads nothing', async () => {
  const { ledger } = await scope.ledger();
  await expect(ledger.operator.items({ queue: 'Bad Queue' })).rejects.toMatchObject({ fields: ['queue'] });
  await expect(ledger.operator.items({ queue: 'q' }, { limit: 500 })).rejects.toMatchObject({ fields: ['limit'] });
  await expect(ledger.operator.items({ queue: 'q' }, { after: 'garbage' })).rejects.toBeInstanceOf(ValidationError);
  await expect(ledger.operator.items({ queue: 'q', state: 'nope' as never })).rejects.toMatchObject({
    fields: ['state'],
  });
  await expect(ledger.operator.purge({ queue: 'q', state: 'pending' as never })).rejects.toMatchObject({
    fields: ['state'],
  });
});
