// Repair in place (Ledger.repair): a dead or cancelled item back to pending as itself, its lane's order, its guard.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import { RepairRejectedError, ValidationError } from '../src/errors.js';
import { errorDigest } from '../src/ledger/ids.js';
import type { WorkItem } from '../src/ledger/types.js';
import { claimAll, claimOne, freshQueue, history, itemCount, laneRow, mustGet, only } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';
import { lanewake } from './support/cli.js';

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

/** The lane's next claimable item ends dead after two attempts. */
async function killHead(queue: string): Promise<WorkItem> {
  const c = await claimOne(ledger, queue);
  await ledger.retry(c, { error: 'first', delayMs: 0 });
  const c2 = await claimOne(ledger, queue);
  expect(c2.id).toBe(c.id);
  await ledger.fail(c2, { error: 'fatal: gone' });
  return mustGet(ledger, c.id);
}

function guardOf(item: WorkItem): { expectAttempt: number; expectErrorDigest: string; reason: string; actor: string } {
  return {
    expectAttempt: item.attempt,
    expectErrorDigest: errorDigest(item.lastError),
    reason: 'upstream fixed',
    actor: 'ops:ana',
  };
}

async function refusal(p: Promise<unknown>): Promise<RepairRejectedError> {
  const e = await p.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(e).toBeInstanceOf(RepairRejectedError);
  return e as RepairRejectedError;
}

describe('repair in place', () => {
  test(
    'the item is pending again as itself: id, lane place, ' +
      'idempotency key, fresh budget; the repair is in its history',
    async () => {
      const queue = freshQueue('repair');
      const enq = await ledger.enqueue({
        queue,
        type: 'sync',
        payload: { v: 1 },
        lane: 'L',
        idempotencyKey: 'k-1',
        maxAttempts: 4,
      });
      const dead = await killHead(queue);
      expect(dead).toMatchObject({ state: 'dead', attempt: 2, laneSeq: 1 });
      expect(await laneRow(ledger, queue, 'L')).toMatchObject({ busy: false });

      const r = await ledger.repair(dead.id, { ...guardOf(dead), repairId: 'rep-1' });
      expect(r).toEqual({ id: dead.id, repairId: 'rep-1', duplicate: false, isHead: true });
      const item = await mustGet(ledger, dead.id);
      expect(item).toMatchObject({
        id: enq.id,
        state: 'pending',
        lane: 'L',
        laneSeq: 1,
        isHead: true,
        idempotencyKey: 'k-1',
        attempt: 0,
        maxAttempts: 4,
        lastError: null,
        failureClass: null,
        terminalAt: null,
        replayOf: null,
      });
      expect(await laneRow(ledger, queue, 'L')).toMatchObject({ busy: true });
      const repairRow = (await history(ledger, dead.id)).at(-1)!;
      expect(repairRow).toMatchObject({
        outcome: 'repaired',
        attempt: 2,
        repairId: 'rep-1',
        error: 'upstream fixed',
        worker: 'ops:ana',
      });
      // The same idempotency key still finds it, not a new item.
      expect(
        await ledger.enqueue({ queue, type: 'sync', payload: { v: 1 }, lane: 'L', idempotencyKey: 'k-1' }),
      ).toMatchObject({ id: dead.id, duplicate: true });

      // A repeat of the same repair (its answer lost) does nothing more.
      expect(await ledger.repair(dead.id, { ...guardOf(dead), repairId: 'rep-1' })).toMatchObject({ duplicate: true });
      expect((await history(ledger, dead.id)).filter((h) => h.outcome === 'repaired')).toHaveLength(1);

      // A new item of the lane waits behind it; it runs, with a fresh budget, and the lane goes on.
      const later = await ledger.enqueue({ queue, type: 'sync', payload: { v: 3 }, lane: 'L' });
      const run = only(await claimAll(ledger, queue));
      expect(run).toMatchObject({ id: dead.id, attempt: 1 });
      await ledger.complete(run);
      expect((await claimOne(ledger, queue)).id).toBe(later.id);
    },
  );

  test('later pending items of its lane wait behind it again; those that completed stay completed', async () => {
    const queue = freshQueue('repair-order');
    const [a, b, c] = await ledger.enqueueMany(
      [1, 2, 3].map((v) => ({ queue, type: 'sync', payload: { v }, lane: 'L' })),
    );
    const dead = await killHead(queue); // a dies; the lane passes it
    expect(dead.id).toBe(a!.id);
    const bRun = await claimOne(ledger, queue);
    expect(bRun.id).toBe(b!.id);
    await ledger.complete(bRun);
    expect(await mustGet(ledger, c!.id)).toMatchObject({ state: 'pending', isHead: true });

    const r = await ledger.repair(dead.id, guardOf(dead));
    expect(r.isHead).toBe(true);
    expect(await mustGet(ledger, c!.id)).toMatchObject({ state: 'pending', isHead: false });
    expect(await mustGet(ledger, b!.id)).toMatchObject({ state: 'completed' });

    // Only the repaired item is claimable; c runs after it.
    const first = await claimAll(ledger, queue);
    expect(first.map((i) => i.id)).toEqual([a!.id]);
    await ledger.complete(first[0]!);
    const next = await claimAll(ledger, queue);
    expect(next.map((i) => i.id)).toEqual([c!.id]);
    await ledger.complete(next[0]!);
    expect(await laneRow(ledger, queue, 'L')).toMatchObject({ busy: false });
  });

  test("refused while its lane's head runs (nothing written); allowed once it ended", async () => {
    const queue = freshQueue('repair-busy');
    const [, b, c] = await ledger.enqueueMany(
      [1, 2, 3].map((v) => ({ queue, type: 'sync', payload: { v }, lane: 'L' })),
    );
    const dead = await killHead(queue);
    const running = await claimOne(ledger, queue);
    expect(running.id).toBe(b!.id);
    const historyBefore = await history(ledger, dead.id);

    const e = await refusal(ledger.repair(dead.id, guardOf(dead)));
    expect(e.reason).toBe('lane_busy');
    expect(await mustGet(ledger, dead.id)).toEqual(dead);
    expect(await history(ledger, dead.id)).toEqual(historyBefore);

    await ledger.complete(running);
    expect((await ledger.repair(dead.id, guardOf(dead))).isHead).toBe(true);
    expect(await mustGet(ledger, c!.id)).toMatchObject({ isHead: false });
  });

  test('an item cancelled while it waited behind a running head waits its turn again', async () => {
    const queue = freshQueue('repair-wait');
    const [a, b, c] = await ledger.enqueueMany(
      [1, 2, 3].map((v) => ({ queue, type: 'sync', payload: { v }, lane: 'L' })),
    );
    const running = await claimOne(ledger, queue);
    expect(running.id).toBe(a!.id);
    expect(await ledger.cancel(b!.id, 'not now')).toBe('cancelled');
    const cancelled = await mustGet(ledger, b!.id);

    const r = await ledger.repair(b!.id, guardOf(cancelled));
    expect(r.isHead).toBe(false);
    expect(await mustGet(ledger, b!.id)).toMatchObject({ state: 'pending', isHead: false });
    await ledger.complete(running);
    // The hand-on reaches it again, before c.
    expect((await claimOne(ledger, queue)).id).toBe(b!.id);
    expect(await mustGet(ledger, c!.id)).toMatchObject({ isHead: false });
  });

  test('a laneless keyed item is admitted by its key again', async () => {
    const queue = freshQueue('repair-key');
    await ledger.setConcurrencyLimit(queue, 1);
    await ledger.enqueue({ queue, type: 'sync', payload: 1, concurrencyKey: 'tenant' });
    const dead = await killHead(queue);
    const other = await ledger.enqueue({ queue, type: 'sync', payload: 2, concurrencyKey: 'tenant' });
    const holding = await claimOne(ledger, queue);
    expect(holding.id).toBe(other.id);

    const r = await ledger.repair(dead.id, guardOf(dead));
    expect(r.isHead).toBe(false); // the key's one slot is held: it waits in the key's line
    expect(await claimAll(ledger, queue)).toEqual([]);
    await ledger.complete(holding);
    expect((await claimOne(ledger, queue)).id).toBe(dead.id);
  });

  test('the guard: a wrong attempt, error digest, state, or a replayed item is refused, nothing written', async () => {
    const queue = freshQueue('repair-guard');
    await ledger.enqueue({ queue, type: 'sync', payload: 1 });
    const dead = await killHead(queue);
    const count = await itemCount(ledger, queue);
    expect((await refusal(ledger.repair(dead.id, { ...guardOf(dead), expectAttempt: 1 }))).reason).toBe(
      'attempt_mismatch',
    );
    expect(
      (await refusal(ledger.repair(dead.id, { ...guardOf(dead), expectErrorDigest: errorDigest('first') }))).reason,
    ).toBe('error_mismatch');
    expect((await refusal(ledger.repair('no-such-item', guardOf(dead)))).reason).toBe('not_found');
    expect(await mustGet(ledger, dead.id)).toEqual(dead);
    expect(await itemCount(ledger, queue)).toBe(count);
    await expect(ledger.repair(dead.id, { ...guardOf(dead), reason: '' })).rejects.toThrow(ValidationError);

    // Repaired once: the same view again is refused, its state moved on.
    await ledger.repair(dead.id, guardOf(dead));
    expect((await refusal(ledger.repair(dead.id, guardOf(dead)))).reason).toBe('not_replayable_state');

    // A replayed item cannot be repaired too: that would be the same work twice.
    const other = freshQueue('repair-replayed');
    await ledger.enqueue({ queue: other, type: 'sync', payload: 2 });
    const c = await claimOne(ledger, other);
    await ledger.fail(c, { error: 'bad' });
    const failed = await mustGet(ledger, c.id);
    await ledger.replay(failed.id, {
      expectAttempt: failed.attempt,
      expectErrorDigest: errorDigest(failed.lastError),
    });
    expect((await refusal(ledger.repair(failed.id, guardOf(failed)))).reason).toBe('already_replayed');
  });
});

describe('lanewake repair', () => {
  test(
    'inspect shows the digest; repair refuses a stale view (exit 1, ' +
      'nothing written), then repairs with the reason and actor',
    async () => {
      const queue = freshQueue('cli-repair');
      await ledger.enqueue({ queue, type: 'sync', payload: 1, lane: 'L' });
      const dead = await killHead(queue);
      const digest = errorDigest(dead.lastError);
      const inspect = await lanewake(['--database-url', tl.url, 'inspect', dead.id]);
      expect(inspect.out).toContain(digest);

      const base = [
        '--database-url',
        tl.url,
        'repair',
        dead.id,
        '--expect-error-digest',
        digest,
        '--reason',
        'bad deploy rolled back',
        '--actor',
        'ops:bo',
      ];
      const stale = await lanewake([...base, '--expect-attempt', '1']);
      expect(stale.code).toBe(1);
      expect(stale.err).toMatch(/refused: attempt mismatch/);
      expect(await mustGet(ledger, dead.id)).toEqual(dead);

      const ok = await lanewake([...base, '--expect-attempt', String(dead.attempt), '--json']);
      expect(ok.code, ok.err).toBe(0);
      expect(JSON.parse(ok.out)).toMatchObject({ id: dead.id, isHead: true, duplicate: false });
      expect((await history(ledger, dead.id)).at(-1)).toMatchObject({
        outcome: 'repaired',
        worker: 'ops:bo',
        error: 'bad deploy rolled back',
      });
      const after = await lanewake(['--database-url', tl.url, 'inspect', dead.id]);
      expect(after.out).toMatch(/repaired .*ops:bo.*repair \S+: bad deploy rolled back/);
    },
  );
});
