import { expect, test } from 'vitest';
import { ValidationError } from '../src/errors.js';
import { Producer } from '../src/producer/producer.js';
import { ENQUEUES_IN_FLIGHT } from '../src/producer/enqueue-batcher.js';
import { uniqueQueue } from './support/engine.js';
import { onEveryStatement } from './support/mysql-statements.js';
import type { TestLedger } from './support/ledger.js';
import { testScope } from './support/scope.js';

// Group commit of single enqueues (src/producer/enqueue-batcher.ts): what arrives while others are
// in flight shares a batch.
const scope = testScope();

/** Counts the item INSERTs this process sends from now on, and how many rows each carried. */
function countItemInserts(): { statements: () => number } {
  let statements = 0;
  const stop = onEveryStatement((text) => {
    if (/INSERT INTO `lw_items`/.test(text)) statements++;
  });
  scope.cleanup(async () => stop());
  return { statements: () => statements };
}

test('single enqueues arriving together share batches: each its own result, far fewer inserts than items', async () => {
  const tl = await scope.ledger();
  const producer = new Producer({ ledger: tl.ledger });
  const queue = uniqueQueue('batched');
  const inserts = countItemInserts();
  const N = 60;
  const results = await Promise.all(
    Array.from({ length: N }, (_, k) =>
      producer.enqueue({ queue, type: 't', payload: { k }, ...(k % 3 === 0 ? { lane: `L${k % 4}` } : {}) }),
    ),
  );
  // Every caller got its own item, with its own payload, and lanes kept the callers' order.
  expect(new Set(results.map((r) => r.id)).size).toBe(N);
  for (const [k, r] of results.entries()) expect((await tl.ledger.get(r.id))?.payload).toEqual({ k });
  const byLane = new Map<string, number[]>();
  for (const [k, r] of results.entries()) {
    if (k % 3 !== 0) continue;
    // A laned item has a place in its lane: a missing one is a fault, not a 0.
    expect(r.laneSeq, `item ${k}`).toEqual(expect.any(Number));
    const lane = `L${k % 4}`;
    byLane.set(lane, [...(byLane.get(lane) ?? []), r.laneSeq!]);
  }
  expect([...byLane.keys()].sort()).toEqual(['L0', 'L1', 'L2', 'L3']);
  // In the callers' order, each lane's places rise strictly.
  for (const [lane, seqs] of byLane)
    expect(
      seqs.every((seq, i) => i === 0 || seq > seqs[i - 1]!),
      `${lane}: ${seqs.join(', ')}`,
    ).toBe(true);
  // The first ENQUEUES_IN_FLIGHT went alone; the rest waited and went together.
  expect(inserts.statements()).toBeGreaterThanOrEqual(ENQUEUES_IN_FLIGHT + 1);
  expect(inserts.statements()).toBeLessThanOrEqual(N / 4);
});

/**
 * Of 12 enqueues, only the one at index 7 failed, with a ValidationError naming `field` alone;
 * the other 11 are pending.
 */
async function expectOnlySeventhFailed(
  tl: TestLedger,
  queue: string,
  settled: readonly PromiseSettledResult<unknown>[],
  field: string,
): Promise<void> {
  const failed = settled.flatMap((s, k) => (s.status === 'rejected' ? [{ k, error: s.reason as unknown }] : []));
  expect(failed.map((f) => f.k)).toEqual([7]);
  expect(failed[0]?.error).toBeInstanceOf(ValidationError);
  expect((failed[0]?.error as ValidationError | undefined)?.issues.map((i) => i.field)).toEqual([field]);
  const [stats] = await tl.ledger.stats(queue);
  expect(stats?.counts.pending.count).toBe(11);
}

test('a bad batched input fails alone, naming its field as a single enqueue does; the others are written', async () => {
  const tl = await scope.ledger();
  const producer = new Producer({ ledger: tl.ledger });
  const queue = uniqueQueue('batched-bad');
  const settled = await Promise.allSettled(
    Array.from({ length: 12 }, (_, k) =>
      producer.enqueue({ queue, type: 't', payload: k === 7 ? { bad: Number.NaN } : { k } }),
    ),
  );
  await expectOnlySeventhFailed(tl, queue, settled, 'payload.bad');
});

test(
  "a key too long for its type's own limit, among batched ones, " +
    "fails alone as a single enqueue's; the others are written",
  async () => {
    // Only the ledger knows that a type has a limit of its own (its key is stored with the type):
    // the batch is refused whole.
    const tl = await scope.ledger();
    const producer = new Producer({ ledger: tl.ledger });
    const queue = uniqueQueue('batched-key');
    await tl.ledger.setConcurrencyLimit(queue, 2, { type: 'mail' });
    const settled = await Promise.allSettled(
      Array.from({ length: 12 }, (_, k) =>
        producer.enqueue({
          queue,
          type: 'mail',
          concurrencyKey: k === 7 ? 'k'.repeat(251) : `tenant:${k}`,
          payload: { k },
        }),
      ),
    );
    await expectOnlySeventhFailed(tl, queue, settled, 'concurrencyKey');
  },
);
