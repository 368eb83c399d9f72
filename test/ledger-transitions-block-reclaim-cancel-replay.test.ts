// The ledger's transitions: blocked items and their dependencies, reclaim of expired leases, cancel and replay.
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import { ReplayRejectedError } from '../src/errors.js';
import { createLogger } from '../src/log.js';
import { Reconciler } from '../src/supervisor/reconciler.js';
import { errorDigest } from '../src/ledger/ids.js';
import type { WorkItem } from '../src/ledger/types.js';
import {
  claimAll,
  claimOne,
  expireAndReclaim,
  freshQueue,
  history,
  itemCount,
  laneRow,
  ms,
  mustGet,
  only,
  waitRow,
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

describe('block and dependencies', () => {
  test('block parks the item; wakeDependency makes it pending again', async () => {
    const queue = freshQueue('block');
    const otherQueue = freshQueue('block-other');
    await ledger.enqueue({ queue, type: 't', payload: 1 });
    await ledger.enqueue({ queue: otherQueue, type: 't', payload: 2 });
    const c = await claimOne(ledger, queue);
    const o = await claimOne(ledger, otherQueue);
    const before = await ledger.now();
    expect(await ledger.block(c, { dependencyKey: 'repo:42', maxWaitMs: 600_000 })).toEqual({
      won: true,
      state: 'blocked',
    });
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
    expect((await ledger.block(c, { dependencyKey: 'dep-probe', maxWaitMs: 600_000, probeAfterMs: 150 })).won).toBe(
      true,
    );
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
  test('a blocked item with no waits row (blocked before schema 3) is found again by the reconciler', async () => {
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

    const reconciler = new Reconciler({
      ledger,
      queues: [queue],
      intervalMs: 3_600_000,
      retentionMs: 0,
      log: createLogger('test', 'silent'),
    });
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
    const heldQueue = (await mustGet(ledger, held.id)).queue;
    const h = only(await ledger.claimByIds({ queue: heldQueue, owner: 'w', leaseMs: 600_000, ids: [held.id] }));
    // A live lease is not reclaimed (c's 200 ms may be over already on a busy server: it is not the one asked about).
    expect((await ledger.reclaimExpired({ queue: heldQueue })).reclaimed).toEqual([]);
    await expireAndReclaim(ledger, queue, [c.id]);
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
    await ledger.enqueue({
      queue,
      type: 'sync',
      payload: { repo: 7 },
      priority: 3,
      queueClass: 'bulk',
      maxAttempts: 4,
      ...(lane ? { lane } : {}),
    });
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
    const err = await ledger
      .replay(dead.id, { expectAttempt: 2, expectErrorDigest: errorDigest(dead.lastError) })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReplayRejectedError);
    expect((err as ReplayRejectedError).reason).toBe('already_replayed');
    expect(await itemCount(ledger, queue)).toBe(count);
  });

  test('the guard rejects a wrong attempt or error digest and writes nothing', async () => {
    const queue = freshQueue('replay-guard');
    const dead = await deadItem(queue);
    const count = await itemCount(ledger, queue);
    const lanes = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${ledger.tables.lanes}`.execute(ledger.db);

    const wrongAttempt = await ledger
      .replay(dead.id, { expectAttempt: 1, expectErrorDigest: errorDigest(dead.lastError) })
      .catch((e: unknown) => e);
    expect(wrongAttempt).toBeInstanceOf(ReplayRejectedError);
    expect((wrongAttempt as ReplayRejectedError).reason).toBe('attempt_mismatch');

    const wrongDigest = await ledger
      .replay(dead.id, { expectAttempt: 2, expectErrorDigest: errorDigest('first') })
      .catch((e: unknown) => e);
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
    const err = await ledger
      .replay(done.id, { expectAttempt: 1, expectErrorDigest: errorDigest(null) })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReplayRejectedError);
    expect((err as ReplayRejectedError).reason).toBe('not_replayable_state');
    const missing = await ledger
      .replay('no-such-item', { expectAttempt: 0, expectErrorDigest: errorDigest(null) })
      .catch((e: unknown) => e);
    expect((missing as ReplayRejectedError).reason).toBe('not_found');

    expect(await ledger.cancel(b!.id, 'oops')).toBe('cancelled');
    const r = await ledger.replay(b!.id, { expectAttempt: 0, expectErrorDigest: errorDigest('oops') });
    expect(await mustGet(ledger, r.id)).toMatchObject({ state: 'pending', payload: 2, replayOf: b!.id });
  });
});
