import { sql } from 'kysely';
import { beforeEach, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { ValidationError } from '../src/errors.js';
import { errorDigest } from '../src/ledger/ids.js';
import type { ClaimedItem, SuccessorClaim } from '../src/ledger/types.js';
import { Producer } from '../src/producer/producer.js';
import { uniqueQueue } from './support/engine.js';
import { freshQueue } from './support/items.js';
import { waitFor, type TestLedger } from './support/ledger.js';
import { testScope } from './support/scope.js';

// Concurrency keys: at most the queue's limit of one key's items admitted at once, held by the ledger
// (docs/design/keys.md, Concurrency keys).

const scope = testScope();
let tl: TestLedger;
beforeEach(async () => {
  tl = await scope.ledger();
});

async function claimAll(queue: string): Promise<ClaimedItem[]> {
  return (await tl.ledger.claim({ queue, owner: 'w', limit: 100, leaseMs: 60_000 })).items;
}

function byKey(items: readonly ClaimedItem[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const i of items) out[i.concurrencyKey ?? '-'] = (out[i.concurrencyKey ?? '-'] ?? 0) + 1;
  return out;
}

describe('concurrency keys at the ledger', () => {
  test(
    'a key admits up to the limit, the rest wait unseen by ' +
      'claims, and an end hands its slot to the earliest waiting',
    async () => {
      const queue = freshQueue('keys');
      await tl.ledger.setConcurrencyLimit(queue, 3);
      const a = await tl.ledger.enqueueMany(
        Array.from({ length: 8 }, (_, i) => ({ queue, type: 't', concurrencyKey: 'tenant:a', payload: { i } })),
      );
      await tl.ledger.enqueueMany(
        [0, 1].map((i) => ({ queue, type: 't', concurrencyKey: 'tenant:b', payload: { i } })),
      );
      // Singles, in a later batch, take what is left of a key's room.
      await tl.ledger.enqueue({ queue, type: 't', concurrencyKey: 'tenant:b', payload: { i: 2 } });
      await tl.ledger.enqueue({ queue, type: 't', concurrencyKey: 'tenant:b', payload: { i: 3 } });
      await tl.ledger.enqueue({ queue, type: 't', payload: { free: true } });
      const first = await claimAll(queue);
      expect(byKey(first)).toEqual({ 'tenant:a': 3, 'tenant:b': 3, '-': 1 });
      expect(
        first
          .filter((c) => c.concurrencyKey === 'tenant:a')
          .map((c) => c.id)
          .sort(),
      ).toEqual(
        a
          .slice(0, 3)
          .map((r) => r.id)
          .sort(),
      );
      expect(await claimAll(queue)).toEqual([]);
      // One of a's ends: its slot goes to a's earliest waiting item, which a claim then finds.
      const doneA = first.find((c) => c.concurrencyKey === 'tenant:a')!;
      expect(await tl.ledger.complete(doneA)).toMatchObject({ won: true });
      const next = await claimAll(queue);
      expect(next.map((c) => c.id)).toEqual([a[3]!.id]);
      // A waiting item cancelled leaves the line; an admitted one cancelled hands its slot on.
      expect(await tl.ledger.cancel(a[4]!.id)).toBe('cancelled');
      const failA = first.find((c) => c.concurrencyKey === 'tenant:a' && c.id !== doneA.id)!;
      expect(await tl.ledger.fail(failA, { error: 'boom' })).toMatchObject({ won: true, state: 'dead' });
      expect((await claimAll(queue)).map((c) => c.id)).toEqual([a[5]!.id]);
      // A raised limit admits at once: a's last two, and b's fourth.
      expect(await tl.ledger.setConcurrencyLimit(queue, 5)).toBe(2);
      expect(byKey(await claimAll(queue))).toEqual({ 'tenant:a': 2, 'tenant:b': 1 });
      const keyRow = await sql<{
        admitted: number;
      }>`SELECT admitted FROM lw_keys WHERE queue = ${queue} AND ckey = 'tenant:a'`.execute(tl.ledger.db);
      expect(Number(keyRow.rows[0]?.admitted)).toBe(5);
    },
  );

  test(
    "one batch admits each of its keys up to that key's own room: " +
      'what it holds already, its count in the batch, its limit',
    async () => {
      const queue = freshQueue('keysmix');
      await tl.ledger.setConcurrencyLimit(queue, 3);
      await tl.ledger.setConcurrencyLimit(queue, 2, { type: 'mail' });
      await tl.ledger.enqueueMany([
        ...['A', 'B'].map((k) => ({ queue, type: 't', concurrencyKey: k, payload: {} })),
        { queue, type: 'mail', concurrencyKey: 'A', payload: {} },
      ]);
      const batch = [
        ...[0, 1, 2].map((i) => ({ queue, type: 't', concurrencyKey: 'A', payload: { i } })),
        { queue, type: 't', concurrencyKey: 'B', payload: {} },
        ...[0, 1].map((i) => ({ queue, type: 'mail', concurrencyKey: 'A', payload: { i } })),
        ...[0, 1].map((i) => ({ queue, type: 't', concurrencyKey: 'C', payload: { i } })),
      ];
      const made = await tl.ledger.enqueueMany(batch);
      const heads = await Promise.all(made.map(async (m) => (await tl.ledger.get(m.id))?.isHead));
      // A holds 1 of 3: two of its three are admitted. B holds 1. mail's A holds 1 of mail's own limit
      // of 2: one. C is new: both.
      expect(heads).toEqual([true, true, false, true, true, false, true, true]);
      const more = [
        await tl.ledger.enqueue({ queue, type: 't', concurrencyKey: 'B', payload: {} }),
        await tl.ledger.enqueue({ queue, type: 't', concurrencyKey: 'B', payload: {} }),
      ];
      expect(await Promise.all(more.map(async (m) => (await tl.ledger.get(m.id))?.isHead))).toEqual([true, false]);
    },
  );

  test('the same holds on the transactional insert path (idempotency keys) and for batch completions', async () => {
    const queue = freshQueue('keystx');
    await tl.ledger.setConcurrencyLimit(queue, 2);
    const made = await tl.ledger.enqueueMany(
      Array.from({ length: 5 }, (_, i) => ({
        queue,
        type: 't',
        concurrencyKey: 'k',
        idempotencyKey: `i${i}`,
        payload: { i },
      })),
    );
    const first = await claimAll(queue);
    expect(first.map((c) => c.id).sort()).toEqual(
      made
        .slice(0, 2)
        .map((m) => m.id)
        .sort(),
    );
    const results = await tl.ledger.completeMany(first.map((handle) => ({ handle })));
    expect(results.every((r) => r.won)).toBe(true);
    expect((await claimAll(queue)).map((c) => c.id).sort()).toEqual(
      made
        .slice(2, 4)
        .map((m) => m.id)
        .sort(),
    );
  });

  test('a batch completion hands each key its earliest waiting, however many of its items end together', async () => {
    const queue = freshQueue('keysmany');
    await tl.ledger.setConcurrencyLimit(queue, 6);
    // Key m: 6 admitted, 8 waiting; key f: 6 admitted, 3 waiting.
    const m = await tl.ledger.enqueueMany(
      Array.from({ length: 14 }, (_, i) => ({ queue, type: 't', concurrencyKey: 'm', payload: { i } })),
    );
    const f = await tl.ledger.enqueueMany(
      Array.from({ length: 9 }, (_, i) => ({ queue, type: 't', concurrencyKey: 'f', payload: { i } })),
    );
    const ids = (rows: readonly { id: string }[]): string[] => rows.map((r) => r.id).sort();
    let held = await claimAll(queue);
    expect(ids(held)).toEqual(ids([...m.slice(0, 6), ...f.slice(0, 6)]));
    // All 12 end in one batch: m's 6 slots go to its next 6 (read as a range), f's to its 3 waiting (read by place).
    expect((await tl.ledger.completeMany(held.map((handle) => ({ handle })))).every((r) => r.won)).toBe(true);
    held = await claimAll(queue);
    expect(ids(held)).toEqual(ids([...m.slice(6, 12), ...f.slice(6, 9)]));
    // Ending 4 of m's: its last 2 waiting take 2 of the 4 slots, in order; the key counts 4 held.
    expect(
      (
        await tl.ledger.completeMany(
          held
            .filter((h) => h.concurrencyKey === 'm')
            .slice(0, 4)
            .map((handle) => ({ handle })),
        )
      ).every((r) => r.won),
    ).toBe(true);
    expect(ids(await claimAll(queue))).toEqual(ids(m.slice(12, 14)));
    const keyRow = await sql<{
      admitted: number;
    }>`SELECT admitted FROM lw_keys WHERE queue = ${queue} AND ckey = 'm'`.execute(tl.ledger.db);
    expect(Number(keyRow.rows[0]?.admitted)).toBe(4);
    const waits = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM lw_key_waits WHERE queue = ${queue}`.execute(
      tl.ledger.db,
    );
    expect(Number(waits.rows[0]?.n)).toBe(0);
  });

  test(
    "a batch's ends give what they admit to each completing consumer's " +
      'room in turn; what no room takes is a head for any claim',
    async () => {
      const queue = freshQueue('keysrooms');
      await tl.ledger.setConcurrencyLimit(queue, 1);
      // Keys k0..k3: one item of each admitted and claimed, one waiting.
      const made = await tl.ledger.enqueueMany(
        Array.from({ length: 8 }, (_, i) => ({ queue, type: 't', concurrencyKey: `k${i % 4}`, payload: { i } })),
      );
      const held = await claimAll(queue);
      expect(held.map((h) => h.id).sort()).toEqual(
        made
          .slice(0, 4)
          .map((m) => m.id)
          .sort(),
      );
      const room = (name: string, max: number): SuccessorClaim => ({
        owner: name,
        token: `tok_keysrooms_${name}_01`,
        leaseMs: 60_000,
        max,
      });
      const { results, claimed } = await tl.ledger.completeManyClaimingNext(
        held.map((handle) => ({ handle })),
        [room('a', 1), room('b', 2)],
      );
      expect(results.every((r) => r.won)).toBe(true);
      expect(claimed.map((c) => c.leaseOwner).sort()).toEqual(['a', 'b', 'b']);
      const rest = await claimAll(queue);
      expect(rest).toHaveLength(1);
      expect([...claimed, ...rest].map((c) => c.id).sort()).toEqual(
        made
          .slice(4)
          .map((m) => m.id)
          .sort(),
      );
      // Each end says whether its key left what it admitted for a claim round: only the one no room took.
      expect(held.map((h, i) => [h.concurrencyKey, results[i]?.keyAdmitted])).toEqual(
        held.map((h) => [h.concurrencyKey, h.concurrencyKey === rest[0]?.concurrencyKey]),
      );
      const keyRows = await sql<{ admitted: number }>`SELECT admitted FROM lw_keys WHERE queue = ${queue}`.execute(
        tl.ledger.db,
      );
      expect(keyRows.rows.map((r) => Number(r.admitted))).toEqual([1, 1, 1, 1]);
    },
  );

  test('a batch completion with a lost lease in it gives up the slots of those it ended, and no others', async () => {
    const queue = freshQueue('keyslost');
    await tl.ledger.setConcurrencyLimit(queue, 3);
    // Key k holds two admitted items and nothing waits: its slots are given up with the completion, in one round trip.
    await tl.ledger.enqueueMany([0, 1].map((i) => ({ queue, type: 't', concurrencyKey: 'k', payload: { i } })));
    const [a, b] = await claimAll(queue);
    const admitted = async (): Promise<number> =>
      Number(
        (
          await sql<{ admitted: number }>`SELECT admitted FROM lw_keys WHERE queue = ${queue} AND ckey = 'k'`.execute(
            tl.ledger.db,
          )
        ).rows[0]?.admitted,
      );
    const results = await tl.ledger.completeMany([
      { handle: { ...a!, leaseToken: 'tok_keyslost_not_the_holder' } },
      { handle: b! },
    ]);
    expect(results.map((r) => r.won)).toEqual([false, true]);
    expect(await admitted()).toBe(1);
    expect((await tl.ledger.completeMany([{ handle: a! }])).map((r) => r.won)).toEqual([true]);
    expect(await admitted()).toBe(0);
  });

  test('a batch completion with several items of one key and nothing waiting gives up the slot of each', async () => {
    const queue = freshQueue('keysmany');
    await tl.ledger.setConcurrencyLimit(queue, 3);
    await tl.ledger.enqueueMany(
      ['k', 'k', 'j', 'k'].map((key, i) => ({ queue, type: 't', concurrencyKey: key, payload: { i } })),
    );
    const held = await claimAll(queue);
    expect(held).toHaveLength(4);
    const results = await tl.ledger.completeMany(held.map((handle) => ({ handle })));
    expect(results.map((r) => r.won)).toEqual([true, true, true, true]);
    const rows = await sql<{
      ckey: string;
      admitted: number;
    }>`SELECT ckey, admitted FROM lw_keys WHERE queue = ${queue} ORDER BY ckey`.execute(tl.ledger.db);
    expect(rows.rows.map((r) => [r.ckey, Number(r.admitted)])).toEqual([
      ['j', 0],
      ['k', 0],
    ]);
    // The key's whole limit is free again: the next three are admitted at once.
    await tl.ledger.enqueueMany(
      [0, 1, 2].map((i) => ({ queue, type: 't', concurrencyKey: 'k', payload: { again: i } })),
    );
    expect(byKey(await claimAll(queue))).toEqual({ k: 3 });
  });

  test('explain names the key at its limit; bad input names its field and writes nothing', async () => {
    const queue = freshQueue('keyswhy');
    await tl.ledger.setConcurrencyLimit(queue, 1);
    const [held, waiting] = await tl.ledger.enqueueMany(
      [0, 1].map((i) => ({ queue, type: 't', concurrencyKey: 'k', payload: { i } })),
    );
    await claimAll(queue);
    const why = await tl.ledger.explain(waiting!.id);
    expect(why).toMatchObject({ code: 'key_at_limit', details: { key: 'k', admitted: 1, limit: 1 } });
    expect((await tl.ledger.explain(held!.id))?.code).toBe('processing');
    const bad = tl.ledger.enqueue({ queue, type: 't', concurrencyKey: 'k'.repeat(256), payload: {} });
    await expect(bad).rejects.toBeInstanceOf(ValidationError);
    await expect(bad).rejects.toMatchObject({ issues: [expect.objectContaining({ field: 'concurrencyKey' })] });
    await expect(tl.ledger.setConcurrencyLimit(queue, 0)).rejects.toBeInstanceOf(ValidationError);
    const count = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM lw_items WHERE queue = ${queue}`.execute(
      tl.ledger.db,
    );
    expect(Number(count.rows[0]?.n)).toBe(2);
  });
});

describe('a type with a limit of its own', () => {
  test("its keys admit per key and type, apart from the queue's limit and other types, until it ends", async () => {
    const queue = freshQueue('keytype');
    await tl.ledger.setConcurrencyLimit(queue, 1);
    await tl.ledger.setConcurrencyLimit(queue, 2, { type: 'mail' });
    const mail = await tl.ledger.enqueueMany(
      Array.from({ length: 4 }, (_, i) => ({ queue, type: 'mail', concurrencyKey: 'K', payload: { i } })),
    );
    const report = await tl.ledger.enqueueMany(
      Array.from({ length: 3 }, (_, i) => ({ queue, type: 'report', concurrencyKey: 'K', payload: { i } })),
    );
    // On the transactional path (an idempotency key) and the laned one, the type's limit decides as well.
    const keyed = await tl.ledger.enqueue({
      queue,
      type: 'mail',
      concurrencyKey: 'K',
      idempotencyKey: 'once',
      payload: { late: true },
    });
    const laned = await tl.ledger.enqueue({
      queue,
      type: 'mail',
      concurrencyKey: 'K',
      lane: 'L',
      payload: { laned: true },
    });
    const first = await claimAll(queue);
    const byType = (items: readonly ClaimedItem[]): Record<string, number> => {
      const out: Record<string, number> = {};
      for (const i of items) out[i.type] = (out[i.type] ?? 0) + 1;
      return out;
    };
    // Two mail items of K by its own limit, one report item of K by the queue's, and the laned one (a lane admits it).
    expect(byType(first)).toEqual({ mail: 3, report: 1 });
    expect(
      first
        .filter((c) => c.type === 'mail' && c.lane === null)
        .map((c) => c.id)
        .sort(),
    ).toEqual(
      mail
        .slice(0, 2)
        .map((r) => r.id)
        .sort(),
    );
    expect(first.every((c) => c.concurrencyKey === 'K')).toBe(true);
    expect(first.map((c) => `${c.type}:${c.keyScope}`).sort()).toEqual([
      'mail:type',
      'mail:type',
      'mail:type',
      'report:queue',
    ]);
    const why = await tl.ledger.explain(mail[2]!.id);
    expect(why).toMatchObject({
      code: 'key_at_limit',
      details: { key: 'K', scope: 'type', admitted: 2, limit: 2, waiting: 3 },
    });
    expect(await tl.ledger.explain(report[1]!.id)).toMatchObject({
      code: 'key_at_limit',
      details: { key: 'K', scope: 'queue', admitted: 1, limit: 1 },
    });
    // A mail item's end hands its slot to the next mail item, never to a report item.
    const doneMail = first.find((c) => c.type === 'mail' && c.lane === null)!;
    expect(await tl.ledger.complete(doneMail)).toMatchObject({ won: true });
    expect((await claimAll(queue)).map((c) => c.id)).toEqual([mail[2]!.id]);
    // Lifted, the type's waiting items are admitted at once, and its later items fall under the queue's limit.
    expect(await tl.ledger.setConcurrencyLimit(queue, null, { type: 'mail' })).toBe(1);
    expect((await claimAll(queue)).map((c) => c.id).sort()).toEqual([mail[3]!.id, keyed.id].sort());
    const after = await tl.ledger.enqueue({ queue, type: 'mail', concurrencyKey: 'K', payload: { after: true } });
    expect(await tl.ledger.get(after.id)).toMatchObject({ concurrencyKey: 'K', keyScope: 'queue', isHead: false });
    expect((await tl.ledger.get(laned.id))?.keyScope).toBe('type');
    // The operator's views find an item by the key it was given, whichever limit admitted it.
    const listed = await tl.ledger.operator.items({ queue, key: 'K' });
    expect(listed.items.length).toBe(10);
    expect(new Set(listed.items.map((i) => i.concurrencyKey))).toEqual(new Set(['K']));
  });

  test("a replay is a new item: the type's limit of now admits it", async () => {
    const queue = freshQueue('keytypereplay');
    const { id } = await tl.ledger.enqueue({ queue, type: 'mail', concurrencyKey: 'K', maxAttempts: 1, payload: {} });
    const [held] = await claimAll(queue);
    expect(await tl.ledger.fail(held!, { error: 'boom' })).toMatchObject({ won: true, state: 'dead' });
    await tl.ledger.setConcurrencyLimit(queue, 1, { type: 'mail' });
    const dead = await tl.ledger.get(id);
    expect(dead?.keyScope).toBe('queue');
    const replayed = await tl.ledger.replay(id, {
      expectAttempt: dead!.attempt,
      expectErrorDigest: errorDigest(dead!.lastError),
    });
    expect(await tl.ledger.get(replayed.id)).toMatchObject({ concurrencyKey: 'K', keyScope: 'type', isHead: true });
    const second = await tl.ledger.enqueue({ queue, type: 'mail', concurrencyKey: 'K', payload: {} });
    expect(await tl.ledger.get(second.id)).toMatchObject({ keyScope: 'type', isHead: false });
  });

  test('bad input names its field and writes nothing', async () => {
    const queue = freshQueue('keytypebad');
    await tl.ledger.setConcurrencyLimit(queue, 1, { type: 'mail' });
    const separator = tl.ledger.enqueue({ queue, type: 't', concurrencyKey: 'a\u001fb', payload: {} });
    await expect(separator).rejects.toMatchObject({
      name: 'ValidationError',
      issues: [expect.objectContaining({ field: 'concurrencyKey' })],
    });
    // A type-scoped key is stored with its type: together they must fit.
    const long = tl.ledger.enqueueMany([
      { queue, type: 'mail', concurrencyKey: 'ok', payload: {} },
      { queue, type: 'mail', concurrencyKey: 'k'.repeat(251), payload: {} },
    ]);
    await expect(long).rejects.toMatchObject({
      name: 'ValidationError',
      issues: [expect.objectContaining({ field: 'items[1].concurrencyKey' })],
    });
    await expect(tl.ledger.setConcurrencyLimit(queue, 2, { type: 'no spaces' })).rejects.toMatchObject({
      name: 'ValidationError',
      issues: [expect.objectContaining({ field: 'type' })],
    });
    const count = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM lw_items WHERE queue = ${queue}`.execute(
      tl.ledger.db,
    );
    expect(Number(count.rows[0]?.n)).toBe(0);
    // The other type's key of the same length fits: the queue's keys are stored as given.
    await tl.ledger.enqueue({ queue, type: 't', concurrencyKey: 'k'.repeat(251), payload: {} });
  });
});

describe('fair queues', () => {
  async function firstClaim(fair: boolean): Promise<ClaimedItem[]> {
    const queue = freshQueue(fair ? 'fair' : 'unfair');
    if (fair) await tl.ledger.setFairness(queue, 'key');
    // Tenant A floods 500 items over 250 lanes: 250 heads. Then B enqueues 5, laneless.
    await tl.ledger.enqueueMany(
      Array.from({ length: 500 }, (_, i) => ({
        queue,
        type: 't',
        lane: `a${i % 250}`,
        concurrencyKey: 'A',
        payload: { i },
      })),
    );
    await tl.ledger.enqueueMany(
      Array.from({ length: 5 }, (_, i) => ({ queue, type: 't', concurrencyKey: 'B', payload: { i } })),
    );
    return (await tl.ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
  }

  test(
    "a fair queue serves its keys in turn: B's items come in the " +
      "next claim, however many lanes A's flood spreads over",
    async () => {
      expect(byKey(await firstClaim(true))).toEqual({ A: 5, B: 5 });
      // Oldest first, B's items wait behind A's 250 heads.
      expect(byKey(await firstClaim(false))).toEqual({ A: 10 });
    },
  );

  test("a key that comes late starts at the queue's current round, not ahead of everyone", async () => {
    const queue = freshQueue('round');
    await tl.ledger.setFairness(queue, 'key');
    await tl.ledger.enqueueMany(
      Array.from({ length: 40 }, (_, i) => ({ queue, type: 't', concurrencyKey: 'A', payload: { i } })),
    );
    await tl.ledger.enqueueMany(
      Array.from({ length: 40 }, (_, i) => ({ queue, type: 't', concurrencyKey: 'B', payload: { i } })),
    );
    // Half of the work is done: rounds 0 to 19 of A and B.
    const done = (await tl.ledger.claim({ queue, owner: 'w', limit: 40, leaseMs: 60_000 })).items;
    expect(byKey(done)).toEqual({ A: 20, B: 20 });
    await tl.ledger.completeMany(done.map((handle) => ({ handle })));
    await tl.ledger.enqueueMany(
      Array.from({ length: 10 }, (_, i) => ({ queue, type: 't', concurrencyKey: 'C', payload: { i } })),
    );
    const c = await tl.ledger.get(
      (await tl.ledger.enqueue({ queue, type: 't', concurrencyKey: 'C', payload: { last: true } })).id,
    );
    // C's rounds start at the lowest pending round (20), so its 11 items share the next claims with A and B.
    expect(c?.priority).toBe(30);
    expect(byKey((await tl.ledger.claim({ queue, owner: 'w', limit: 30, leaseMs: 60_000 })).items)).toEqual({
      A: 10,
      B: 10,
      C: 10,
    });
  });

  test("a fair queue's consumer claims nothing with completions, so claim rounds deal slots in rounds", async () => {
    // A lane's next claimed as its item ends keeps the lanes a consumer holds in its slots and prefetch buffer ahead
    // of every other key's round: behind a flood of A over many lanes, B waits long (bench/workloads/fairness.ts).
    const run = async (fair: boolean): Promise<Consumer> => {
      const queue = uniqueQueue(fair ? 'fairnext' : 'oldestnext');
      if (fair) await tl.ledger.setFairness(queue, 'key');
      await tl.ledger.enqueueMany(
        Array.from({ length: 200 }, (_, i) => ({
          queue,
          type: 't',
          lane: `a${i % 10}`,
          concurrencyKey: 'A',
          payload: { i },
        })),
      );
      await tl.ledger.enqueueMany(
        Array.from({ length: 20 }, (_, i) => ({
          queue,
          type: 't',
          concurrencyKey: i % 2 === 0 ? 'B' : 'C',
          payload: { i },
        })),
      );
      const c = new Consumer({
        ledger: tl.ledger,
        queue,
        concurrency: 4,
        pollIntervalMs: 100,
        handlers: { t: async () => undefined },
      });
      await scope.start(c);
      await waitFor(() => c.counters.completed === 220 || undefined, 30_000, 'all 220 done');
      return c;
    };
    // Oldest first, lanes and keys hand their next to the consumer whose item ended (lane and key affinity) ...
    expect((await run(false)).counters.claimedWithCompletion).toBeGreaterThan(0);
    // ... a fair queue's consumer leaves them to claim rounds.
    const fair = await run(true);
    expect(fair.counters.claimedWithCompletion).toBe(0);
    expect(fair.counters.claimRounds).toBeGreaterThan(0);
  });

  test("woken by Redis, a fair queue still serves the keys in turn: a flood's wake-ups do not go first", async () => {
    // Wake-ups name their items. Claimed by those names, in the order the wake-ups came, A's flood ran to its
    // end before B's or C's first item, in a fair queue as in any other.
    const tw = scope.wake();
    const queue = uniqueQueue('fairwoken');
    await tl.ledger.setFairness(queue, 'key');
    // Producers in other processes: every item is announced through Redis, none is claimed at insert.
    const producer = new Producer({ ledger: tl.ledger, wake: tw.remote() });
    // Paused while the three tenants enqueue, so every wake-up has come before the first claim,
    // however slow the machine.
    await producer.pause(queue);
    const started: string[] = [];
    const work = async (job: { payload: unknown }): Promise<void> => {
      started.push((job.payload as { k: string }).k);
      await new Promise((r) => setTimeout(r, 5));
    };
    await scope.start(
      new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 2, prefetch: 0, handlers: { t: work } }),
    );
    await producer.enqueueMany(
      Array.from({ length: 60 }, (_, i) => ({
        queue,
        type: 't',
        lane: `a${i}`,
        concurrencyKey: 'A',
        payload: { i, k: 'A' },
      })),
    );
    for (const k of ['B', 'C'])
      await producer.enqueueMany(
        Array.from({ length: 5 }, (_, i) => ({ queue, type: 't', concurrencyKey: k, payload: { i, k } })),
      );
    await producer.resume(queue);
    await waitFor(() => (started.length === 70 ? true : undefined), 30_000, 'all 70 started');
    // By rounds: A B C, A B C, ... for five rounds, then the rest of A. Claimed by name, B's and C's came after A's 60.
    const lastOther = Math.max(started.lastIndexOf('B'), started.lastIndexOf('C'));
    expect(lastOther, started.join('')).toBeLessThan(20);
  });
});

describe('concurrency keys with consumers', () => {
  // Measured where the handlers run: a claim's started_at is its statement's NOW(6), taken before the
  // statement's row-lock waits, so a claim by ids that waited for the hand-on admitting its item
  // records a start earlier than the end it followed. The ledger's counts are checked as well.
  test('8 consumers, keys with limit 3: never more than 3 handlers of a key running at once', async () => {
    const tw = scope.wake();
    const queue = uniqueQueue('keyed');
    await tl.ledger.setConcurrencyLimit(queue, 3);
    const running = new Map<string, number>();
    const peaks = new Map<string, number>();
    const handler = async (job: { payload: unknown }): Promise<void> => {
      const key = (job.payload as { k: string }).k;
      const now = (running.get(key) ?? 0) + 1;
      running.set(key, now);
      peaks.set(key, Math.max(peaks.get(key) ?? 0, now));
      // Each holds its slot until its key runs 3 (or a moment has passed: a key's last items never get there),
      // so the limit is reached however slow the hand-on is on a busy machine, and a fourth would show. Each
      // yields at least once, so the third to start holds its slot too.
      const until = Date.now() + 300;
      do await new Promise((r) => setTimeout(r, 5));
      while ((running.get(key) ?? 0) < 3 && Date.now() < until);
      running.set(key, (running.get(key) ?? 1) - 1);
    };
    for (let i = 0; i < 8; i++) {
      const c = new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 4, handlers: { t: handler } });
      await scope.start(c);
    }
    // In the consumers' process: some are inserted claimed, which the key's limit holds to as well.
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    const keys = ['a', 'b', 'c', 'd'];
    await producer.enqueueMany(
      Array.from({ length: 80 }, (_, i) => ({
        queue,
        type: 't',
        concurrencyKey: keys[i % 4]!,
        payload: { i, k: keys[i % 4] },
      })),
    );
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        producer.enqueue({ queue, type: 't', concurrencyKey: keys[i % 4]!, payload: { single: i, k: keys[i % 4] } }),
      ),
    );
    await waitFor(
      async () => ((await tl.ledger.stats(queue))[0]?.counts.completed.count === 120 ? true : undefined),
      60_000,
      'all 120 done',
    );
    expect([...peaks.keys()].sort()).toEqual(keys);
    for (const peak of peaks.values()) expect(peak).toBeLessThanOrEqual(3);
    // The limit is what held them back, not a lack of slots: it was reached.
    expect(Math.max(...peaks.values())).toBe(3);
    const rows = await sql<{ admitted: number }>`SELECT admitted FROM lw_keys WHERE queue = ${queue}`.execute(
      tl.ledger.db,
    );
    expect(rows.rows.map((r) => Number(r.admitted))).toEqual([0, 0, 0, 0]);
  });

  test("no two keyed completions of a process's consumers in flight share a key", async () => {
    const tw = scope.wake();
    const queue = uniqueQueue('keyedlines');
    await tl.ledger.setConcurrencyLimit(queue, 3);
    // The consumers' own ledger, watched where their completions reach it: the keys of each batch in flight.
    const inFlight = new Map<string, number>();
    let shared = 0;
    /** Keyed completions that came through here: the check above means nothing unless they are all of them. */
    let keyedSeen = 0;
    let batchesInFlight = 0;
    let mostBatchesInFlight = 0;
    // A batch alone in flight waits (up to a bound) for the next to arrive: the process's completions
    // otherwise rarely overlap, and the check above would hold for want of a second batch to share with.
    let release: (() => void) | undefined;
    let holds = 0;
    const real = tl.ledger;
    const watched = new Proxy(real, {
      get(target, prop) {
        if (prop !== 'completeManyClaimingNext') {
          const value: unknown = Reflect.get(target, prop, target);
          return typeof value === 'function' ? value.bind(target) : value;
        }
        return async (...args: Parameters<typeof real.completeManyClaimingNext>) => {
          const keyed = args[0].filter((e) => e.handle.lane === null && e.handle.concurrencyKey !== null);
          const keys = [...new Set(keyed.map((e) => e.handle.concurrencyKey!))];
          keyedSeen += keyed.length;
          mostBatchesInFlight = Math.max(mostBatchesInFlight, ++batchesInFlight);
          for (const k of keys) {
            if ((inFlight.get(k) ?? 0) > 0) shared++;
            inFlight.set(k, (inFlight.get(k) ?? 0) + 1);
          }
          try {
            release?.();
            if (batchesInFlight === 1 && holds < 50) {
              holds++;
              await new Promise<void>((resolve) => {
                release = resolve;
                setTimeout(resolve, 1000).unref();
              });
              release = undefined;
            }
            return await real.completeManyClaimingNext(...args);
          } finally {
            batchesInFlight--;
            for (const k of keys) inFlight.set(k, inFlight.get(k)! - 1);
          }
        };
      },
    });
    // More ends at once than a batch takes (KEYED_BATCH, 500): only then does a second batch go alongside the first.
    for (let i = 0; i < 4; i++)
      await scope.start(
        new Consumer({
          ledger: watched,
          wake: tw.wake,
          queue,
          concurrency: 250,
          handlers: { t: async () => undefined },
        }),
      );
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    await producer.enqueueMany(
      Array.from({ length: 3000 }, (_, i) => ({ queue, type: 't', concurrencyKey: `k${i % 400}`, payload: { i } })),
    );
    await waitFor(
      async () => ((await tl.ledger.stats(queue))[0]?.counts.completed.count === 3000 ? true : undefined),
      60_000,
      'all 3000 done',
    );
    expect(mostBatchesInFlight).toBe(2);
    expect(keyedSeen).toBe(3000);
    expect(shared).toBe(0);
    const rows = await sql<{ admitted: number }>`SELECT admitted FROM lw_keys WHERE queue = ${queue}`.execute(
      tl.ledger.db,
    );
    expect(rows.rows.map((r) => Number(r.admitted))).toEqual(Array.from({ length: 400 }, () => 0));
  });

  test(
    "a handler's own concurrencyLimit holds its type's items of " +
      'a key across 4 consumers; a bad one names its field',
    async () => {
      const tw = scope.wake();
      const queue = uniqueQueue('keyedtype');
      const running = new Map<string, number>();
      const peaks = new Map<string, number>();
      const mail = async (job: { payload: unknown }): Promise<void> => {
        const key = (job.payload as { k: string }).k;
        running.set(key, (running.get(key) ?? 0) + 1);
        peaks.set(key, Math.max(peaks.get(key) ?? 0, running.get(key) ?? 0));
        // Holds its slot until its key runs 2 (or a moment has passed), yielding at least once, so a third would show.
        const until = Date.now() + 300;
        do await new Promise((r) => setTimeout(r, 5));
        while ((running.get(key) ?? 0) < 2 && Date.now() < until);
        running.set(key, (running.get(key) ?? 1) - 1);
      };
      expect(
        () => new Consumer({ ledger: tl.ledger, queue, handlers: { mail: { handle: mail, concurrencyLimit: 0 } } }),
      ).toThrow(
        expect.objectContaining({
          name: 'ValidationError',
          issues: [expect.objectContaining({ field: 'handlers.mail.concurrencyLimit' })],
        }),
      );
      for (let i = 0; i < 4; i++) {
        const c = new Consumer({
          ledger: tl.ledger,
          wake: tw.wake,
          queue,
          concurrency: 4,
          handlers: { mail: { handle: mail, concurrencyLimit: 2 } },
        });
        await scope.start(c);
      }
      // The first consumer's start stored the type's limit: every enqueue from here on holds to it.
      const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
      await producer.enqueueMany(
        Array.from({ length: 30 }, (_, i) => ({
          queue,
          type: 'mail',
          concurrencyKey: i % 2 === 0 ? 'a' : 'b',
          payload: { i, k: i % 2 === 0 ? 'a' : 'b' },
        })),
      );
      await waitFor(
        async () => ((await tl.ledger.stats(queue))[0]?.counts.completed.count === 30 ? true : undefined),
        60_000,
        'all 30 done',
      );
      expect([...peaks.keys()].sort()).toEqual(['a', 'b']);
      expect(Math.max(...peaks.values())).toBe(2);
      const rows = await sql<{
        ckey: string;
        admitted: number;
      }>`SELECT ckey, admitted FROM lw_keys WHERE queue = ${queue} ORDER BY ckey`.execute(tl.ledger.db);
      expect(rows.rows.map((r) => [r.ckey, Number(r.admitted)])).toEqual([
        ['mail\u001fa', 0],
        ['mail\u001fb', 0],
      ]);
    },
  );
});
