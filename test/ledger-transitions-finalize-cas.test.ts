// The ledger's transitions: batch, in-transaction and cancelled finalizes, and that losing a
// finalize's CAS writes nothing.
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import { LeaseLostError } from '../src/errors.js';
import type { ClaimedItem, WorkItem } from '../src/ledger/types.js';
import {
  claimAll,
  claimOne,
  expireAndReclaim,
  freshQueue,
  history,
  historyCount,
  laneRow,
  mustGet,
  only,
  withForeignToken,
} from './support/items.js';
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

  test('completeInTransaction: it commits with the caller’s writes, or the loss rolls them back', async () => {
    const queue = freshQueue('complete-trx');
    await sql`CREATE TABLE IF NOT EXISTS app_effects (item_id VARCHAR(32) PRIMARY KEY) ENGINE=InnoDB`.execute(
      ledger.db,
    );
    const effects = async (id: string): Promise<number> => {
      const r = await sql<{
        n: number | string;
      }>`SELECT COUNT(*) AS n FROM app_effects WHERE item_id = ${id}`.execute(ledger.db);
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

  test(
    'completeWithin says whether the lane got a new head: true ' +
      'with a successor waiting, false when the lane goes idle',
    async () => {
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
    },
  );

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
    expect(await mustGet(ledger, c.id)).toMatchObject({
      state: 'cancelled',
      failureClass: 'cancelled',
      lastError: 'operator asked',
    });
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
        ledger,
        queue,
        first.items.map((i) => i.id),
      );
      const second = await ledger.claimByIds({
        queue,
        owner: 'owner-b',
        leaseMs: 600_000,
        ids: first.items.map((i) => i.id),
      });
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
    await expireAndReclaim(ledger, queue, [c.id]);
    for (const name of OP_NAMES) await expectLoses(name, c, successor);
    expect((await mustGet(ledger, c.id)).state).toBe('pending');
  });
});
