import { afterAll, beforeAll, expect, test } from 'vitest';
import { errorDigest } from '../src/ledger/ids.js';
import type { Ledger } from '../src/ledger/ledger.js';
import type { ClaimedItem, WorkItem } from '../src/ledger/types.js';
import { freshQueue, mustGet, only } from './support/items.js';
import { createTestLedger, ledgerOnPlainPool, type TestLedger } from './support/ledger.js';

// Every way of claiming builds its items with one builder (src/ledger/sql/claimed.ts)
// from the row the claim wrote; an item inserted claimed builds that row from
// the item itself. Each must be, field for field and in the same field order
// (one object shape), what the ledger then holds for the item.

let tl: TestLedger;
let plain: Ledger;
beforeAll(async () => {
  tl = await createTestLedger();
  plain = ledgerOnPlainPool(tl.url);
});
afterAll(async () => {
  await plain?.close();
  await tl?.drop();
});

/** `skewMs`: how far the item's times may be from the row's (an item inserted claimed carries this process's clock). */
async function expectAsStored(ledger: Ledger, item: ClaimedItem, skewMs = 0): Promise<void> {
  const row: WorkItem = await mustGet(ledger, item.id);
  expect(Object.keys(item)).toEqual(Object.keys(row));
  for (const key of Object.keys(row) as (keyof WorkItem)[]) {
    const got = item[key];
    const want = row[key];
    if (skewMs > 0 && got instanceof Date && want instanceof Date) {
      expect(Math.abs(got.getTime() - want.getTime()), key).toBeLessThanOrEqual(skewMs);
    } else {
      expect(got, key).toEqual(want);
    }
  }
}

const OWNER = 'wörker ' + 'z'.repeat(80); // folded and cut as stored

test('a claim on either pool, with an epoch, and by ids: items carry the row, history fields included', async () => {
  const { ledger } = tl;
  const queue = freshQueue('claimed-claim');
  const { epoch } = await ledger.activate({ queue, deployment: 'blue' });
  const [a, b] = await ledger.enqueueMany([
    {
      queue,
      type: 't',
      payload: { x: [1, 'two'] },
      priority: -3,
      queueClass: 'bulk',
      idempotencyKey: 'key-a',
      maxAttempts: 5,
      lane: 'L',
    },
    { queue, type: 'u', payload: 'plain', delayMs: 0 },
  ]);

  const first = await ledger.claim({ queue, owner: OWNER, limit: 10, leaseMs: 45_000, epoch });
  expect(first.items.map((i) => i.id).sort()).toEqual([a!.id, b!.id].sort());
  for (const item of first.items) await expectAsStored(ledger, item);

  // A second attempt carries a checkpoint, the last error and failure class.
  const heldA = first.items.find((i) => i.id === a!.id)!;
  expect(await ledger.checkpoint(heldA, { step: 3 })).toBe(true);
  expect((await ledger.retry(heldA, { error: 'first try failed', failureClass: 'flaky', delayMs: 0 })).won).toBe(true);
  const again = only((await plain.claim({ queue, owner: 'plain-pool', limit: 10, leaseMs: 1_000 })).items);
  expect(again).toMatchObject({
    id: a!.id,
    attempt: 2,
    checkpoint: { step: 3 },
    lastError: 'first try failed',
    failureClass: 'flaky',
  });
  await expectAsStored(ledger, again);

  // Released, then taken back by id on each pool.
  expect((await plain.release(again)).won).toBe(true);
  const byId = only(await plain.claimByIds({ queue, owner: OWNER, leaseMs: 30_000, ids: [a!.id], types: ['t'] }));
  await expectAsStored(ledger, byId);
  expect((await ledger.release(byId)).won).toBe(true);
  const byIdOwn = only(await ledger.claimByIds({ queue, owner: OWNER, leaseMs: 30_000, ids: [a!.id], epoch }));
  await expectAsStored(ledger, byIdOwn);
});

test('a replayed item and a woken blocked item, claimed: replay and dependency fields come from the row', async () => {
  const { ledger } = tl;
  const queue = freshQueue('claimed-history');
  const { id } = await ledger.enqueue({ queue, type: 't', payload: { n: 1 }, maxAttempts: 1 });
  const dead = only((await ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 30_000 })).items);
  expect((await ledger.fail(dead, { error: 'no' })).won).toBe(true);
  const replayed = await ledger.replay(id, {
    expectAttempt: 1,
    expectErrorDigest: errorDigest((await mustGet(ledger, id)).lastError),
  });
  const replay = only((await ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 30_000 })).items);
  expect(replay).toMatchObject({ id: replayed.id, replayOf: id });
  await expectAsStored(ledger, replay);

  expect((await ledger.block(replay, { dependencyKey: 'dep:claimed-view', maxWaitMs: 60_000 })).state).toBe('blocked');
  expect((await ledger.wakeDependency('dep:claimed-view', { queue })).map((w) => w.id)).toEqual([replay.id]);
  const woken = only((await ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 30_000 })).items);
  await expectAsStored(ledger, woken);
});

test("a lane successor claimed with its predecessor's completion, on either pool", async () => {
  for (const ledger of [tl.ledger, plain]) {
    const queue = freshQueue('claimed-successor');
    await ledger.enqueueMany([
      { queue, type: 't', payload: 'head', lane: 'L' },
      { queue, type: 'u', payload: ['next'], lane: 'L', priority: 7, queueClass: 'interactive', maxAttempts: 3 },
    ]);
    const head = only((await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 30_000 })).items);
    const { claimed } = await ledger.completeManyClaimingNext([{ handle: head, result: { ok: true } }], {
      owner: OWNER,
      token: 'tok_claimed_view_01',
      leaseMs: 20_000,
      max: 4,
    });
    const next = only(claimed);
    expect(next).toMatchObject({ laneSeq: 2, leaseToken: 'tok_claimed_view_01', attempt: 1 });
    await expectAsStored(tl.ledger, next);
  }
});

test("items inserted claimed are the row the insert wrote, their times this process's clock", async () => {
  const { ledger } = tl;
  const queue = freshQueue('claimed-insert');
  const { claimed } = await ledger.enqueueClaiming(
    [
      { queue, type: 't', payload: { n: 1 }, priority: 2, queueClass: 'bulk', maxAttempts: 9 },
      { queue, type: 'u', payload: [1, 2], lane: 'idle' },
    ],
    () => ({ owner: OWNER, token: 'tok_claimed_insert1', leaseMs: 30_000, max: 10 }),
  );
  expect(claimed).toHaveLength(2);
  for (const item of claimed) await expectAsStored(ledger, item, 2_000);
  // Its lease is fenced like a claim's: the holder completes it.
  expect(await ledger.completeMany(claimed.map((handle) => ({ handle })))).toEqual([
    { won: true, state: 'completed' },
    { won: true, state: 'completed', laneAdvanced: false },
  ]);
});
