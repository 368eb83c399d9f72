// The ledger's transitions: purge, stats and inspect, ownership epochs.
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import { OwnershipConflictError } from '../src/errors.js';
import { claimAll, claimOne, freshQueue, historyCount, laneRow, mustGet, only } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';
import { exactCounts } from './support/counts.js';

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
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
    await sql`UPDATE ${ledger.tables.items}
      SET created_at = NOW(6) - INTERVAL 3 HOUR, terminal_at = NOW(6) - INTERVAL 2 HOUR
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
    await sql`UPDATE ${ledger.tables.items}
      SET created_at = NOW(6) - INTERVAL 2 DAY, terminal_at = NOW(6) - INTERVAL 1 DAY
      WHERE id = ${first.id}`.execute(ledger.db);
    expect(await ledger.purge({ olderThanMs: 60_000, queue })).toBe(1);
    const again = await ledger.enqueue({ queue, type: 't', payload: 2, lane: 'L' });
    expect((await mustGet(ledger, again.id)).isHead).toBe(true);
    expect((await claimOne(ledger, queue)).id).toBe(again.id);
  });
});

describe('purge of key rows', () => {
  const keyRows = async (queue: string): Promise<string[]> =>
    (
      await sql<{ ckey: string }>`SELECT ckey FROM ${ledger.tables.keys} WHERE queue = ${queue} ORDER BY ckey`.execute(
        ledger.db,
      )
    ).rows.map((r) => r.ckey);
  const age = (ids: string[]) =>
    sql`UPDATE ${ledger.tables.items} SET created_at = NOW(6) - INTERVAL 2 DAY, terminal_at = NOW(6) - INTERVAL 1 DAY
      WHERE id IN (${sql.join(ids)})`.execute(ledger.db);

  test("a key's row goes with its last purged item; a key with an admitted or waiting item keeps it", async () => {
    const queue = freshQueue('purge-keys');
    await ledger.setConcurrencyLimit(queue, 1);
    const [once, firstOfTwo, second] = await ledger.enqueueMany([
      { queue, type: 't', payload: 1, concurrencyKey: 'k1' },
      { queue, type: 't', payload: 2, concurrencyKey: 'k2' },
      { queue, type: 't', payload: 3, concurrencyKey: 'k2' },
      { queue, type: 't', payload: 4, concurrencyKey: 'k3' },
    ]);
    // k1's and k2's first end; k2's second is admitted in its place; k3's stays admitted, unclaimed.
    for (const c of await ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids: [once!.id, firstOfTwo!.id] }))
      await ledger.complete(c);
    expect((await mustGet(ledger, second!.id)).isHead).toBe(true);
    await age([once!.id, firstOfTwo!.id]);
    expect(await ledger.purge({ olderThanMs: 60_000, queue })).toBe(2);
    expect(await keyRows(queue)).toEqual(['k2', 'k3']);
    // The key starts again from nothing: its next item is admitted.
    const again = await ledger.enqueue({ queue, type: 't', payload: 5, concurrencyKey: 'k1' });
    expect((await mustGet(ledger, again.id)).isHead).toBe(true);
  });

  test("a fair queue keeps a key's row while it has rounds dealt past the current one", async () => {
    const queue = freshQueue('purge-fair');
    await ledger.setFairness(queue, 'key');
    const [done, idleDone] = await ledger.enqueueMany([
      { queue, type: 't', payload: 0, concurrencyKey: 'busy' },
      { queue, type: 't', payload: 0, concurrencyKey: 'idle' },
    ]);
    for (const c of await ledger.claimByIds({ queue, owner: 'w', leaseMs: 60_000, ids: [done!.id, idleDone!.id] }))
      await ledger.complete(c);
    // Laned items are not counted by their key (their lane admits them), but they hold rounds 1, 2 and 3.
    await ledger.enqueueMany(
      [1, 2, 3].map((n) => ({ queue, type: 't', payload: n, concurrencyKey: 'busy', lane: 'L' })),
    );
    await age([done!.id, idleDone!.id]);
    expect(await ledger.purge({ olderThanMs: 60_000, queue })).toBe(2);
    expect(await keyRows(queue)).toEqual(['busy']);
  });

  test('rate-limit rows spent before the retention go; a key with a turn ahead stays', async () => {
    const queue = freshQueue('purge-rate');
    await sql`INSERT INTO ${ledger.tables.rateLimits} (queue, rate_key, next_at, reserved_until) VALUES
      (${queue}, 'spent', NOW(6) - INTERVAL 2 DAY, NOW(6) - INTERVAL 2 DAY),
      (${queue}, 'turn ahead', NOW(6) - INTERVAL 2 DAY, NOW(6) + INTERVAL 1 MINUTE),
      (${queue}, 'recent', NOW(6) - INTERVAL 1 SECOND, NOW(6) - INTERVAL 1 SECOND)`.execute(ledger.db);
    expect(await ledger.purge({ olderThanMs: 3_600_000, queue })).toBe(0);
    const left = await sql<{
      rate_key: string;
    }>`SELECT rate_key FROM ${ledger.tables.rateLimits} WHERE queue = ${queue} ORDER BY rate_key`.execute(ledger.db);
    expect(left.rows.map((r) => r.rate_key)).toEqual(['recent', 'turn ahead']);
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
    expect(exactCounts(s)).toEqual({
      pending: 2,
      processing: 1,
      blocked: 1,
      completed: 1,
      skipped: 1,
      dead: 1,
      cancelled: 1,
    });
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
    expect(s!.counts.pending.count).toBe(1);
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
    const missing = await ledger
      .activate({ queue: neverActivated, deployment: 'x', expectEpoch: 4 })
      .catch((e: unknown) => e);
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
