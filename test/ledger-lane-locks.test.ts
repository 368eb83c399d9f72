import { expect, test } from 'vitest';
import type { ClaimedItem } from '../src/ledger/types.js';
import { claimAll, freshQueue, laneRow, mustGet } from './support/items.js';
import { testScope } from './support/scope.js';

/*
 * A busy lane hands on from item row to item row (docs/design/states.md, Atomic lane advance): the end of a head
 * whose lane has work waiting never touches the lane row, which every enqueue into the lane writes, and claim
 * rounds read heads without locking them. So none of the three waits for another, on any server. Each test
 * holds one side's transaction open and needs the other side to finish meanwhile; on a design where both
 * locked the lane row (or a claim round's read locked the successor the open end made head), the other side
 * would wait for the open transaction until the server's lock wait timeout, and the deadline here fails the
 * test long before.
 */
const scope = testScope();

/** `p`, or a failure naming `what` once `ms` have passed. */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: still waiting after ${ms} ms`)), ms)),
  );
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A lane with its head claimed and one item waiting behind it. */
async function busyLane() {
  const tl = await scope.ledger();
  const queue = freshQueue('lane-locks');
  await tl.ledger.enqueueMany([
    { queue, type: 't', payload: 'head', lane: 'L' },
    { queue, type: 't', payload: 'next', lane: 'L' },
  ]);
  const [head] = await claimAll(tl.ledger, queue);
  return { tl, ledger: tl.ledger, queue, head: head as ClaimedItem };
}

test("a busy lane's head completing in a transaction held open holds back no enqueue into the lane", async () => {
  const { ledger, queue, head } = await busyLane();
  const trx = await ledger.db.startTransaction().execute();
  let committed = false;
  try {
    await ledger.completeInTransaction(trx, head, 'done');
    // The completion is written but not committed: an enqueue into the same lane goes through meanwhile.
    const added = await within(
      ledger.enqueue({ queue, type: 't', payload: 'added', lane: 'L' }),
      10_000,
      'the enqueue into the lane',
    );
    expect(added.laneSeq).toBe(3);
    await trx.commit().execute();
    committed = true;
  } finally {
    if (!committed)
      await trx
        .rollback()
        .execute()
        .catch(() => undefined);
  }
  expect((await claimAll(ledger, queue)).map((c) => c.payload)).toEqual(['next']);
  expect(await laneRow(ledger, queue, 'L')).toEqual({ nextSeq: 3, busy: true });
});

test(
  "an enqueue into a busy lane held open in the caller's " +
    "transaction does not hold back the completion of the lane's head",
  async () => {
    const { ledger, queue, head } = await busyLane();
    const trx = await ledger.db.startTransaction().execute();
    let committed = false;
    try {
      const added = await ledger.enqueue({ queue, type: 't', payload: 'added', lane: 'L' }, { transaction: trx });
      expect(added.laneSeq).toBe(3);
      // The enqueue holds the lane row until the caller commits; the head's end hands on to its successor meanwhile.
      expect(await within(ledger.complete(head), 10_000, "the head's completion")).toMatchObject({ won: true });
      await trx.commit().execute();
      committed = true;
    } finally {
      if (!committed)
        await trx
          .rollback()
          .execute()
          .catch(() => undefined);
    }
    expect(await mustGet(ledger, head.id)).toMatchObject({ state: 'completed' });
    expect((await claimAll(ledger, queue)).map((c) => c.payload)).toEqual(['next']);
  },
);

test(
  "claim rounds while a busy lane's head completes in a transaction " +
    'held open neither wait nor take its successor before the commit',
  async () => {
    const { ledger, queue, head } = await busyLane();
    /** Four claim rounds at once, of four owners: what they took. */
    const fourRounds = async (): Promise<ClaimedItem[]> =>
      (
        await Promise.all([0, 1, 2, 3].map((k) => ledger.claim({ queue, owner: `w${k}`, limit: 10, leaseMs: 60_000 })))
      ).flatMap((r) => r.items);
    const trx = await ledger.db.startTransaction().execute();
    let committed = false;
    try {
      await ledger.completeInTransaction(trx, head, 'done');
      // The completion made the successor the lane's head, uncommitted: four claim rounds meanwhile find
      // nothing, and do not wait.
      expect(await within(fourRounds(), 10_000, 'the claim rounds')).toEqual([]);
      await trx.commit().execute();
      committed = true;
    } finally {
      if (!committed)
        await trx
          .rollback()
          .execute()
          .catch(() => undefined);
    }
    expect((await fourRounds()).map((c) => c.payload)).toEqual(['next']);
  },
);
