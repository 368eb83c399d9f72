import { afterAll, beforeAll, expect, test } from 'vitest';
import type { ClaimedItem } from '../src/ledger/types.js';
import { claimOne, freshQueue, laneRow, mustGet } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

let tl: TestLedger;
beforeAll(async () => {
  tl = await createTestLedger();
});
afterAll(async () => {
  await tl?.drop();
});

test('completeMany finalizes a mixed batch and hands every lane to its successor', async () => {
  const { ledger } = tl;
  const queue = freshQueue('batch');
  const inputs = [];
  for (let l = 0; l < 5; l++)
    for (let k = 0; k < 3; k++) inputs.push({ queue, type: 't', payload: { l, k }, lane: `lane-${l}` });
  for (let k = 0; k < 5; k++) inputs.push({ queue, type: 't', payload: { k } });
  await ledger.enqueueMany(inputs);
  const perLane = new Map<string, number[]>();
  for (let round = 0; round < 3; round++) {
    const c = await ledger.claim({ queue, owner: 'w', limit: 100, leaseMs: 30_000 });
    // Round 0: 5 lane heads + 5 loners; then only the 5 successors.
    expect(c.items.length).toBe(round === 0 ? 10 : 5);
    const res = await ledger.completeMany(c.items.map((h) => ({ handle: h, result: h.id })));
    expect(res.every((r) => r.won)).toBe(true);
    const again = await ledger.completeMany(c.items.map((h) => ({ handle: h })));
    expect(again.some((r) => r.won)).toBe(false);
    for (const item of c.items) {
      if (item.lane) perLane.set(item.lane, [...(perLane.get(item.lane) ?? []), item.laneSeq ?? -1]);
      expect((await mustGet(ledger, item.id)).result).toBe(item.id);
    }
  }
  for (const seqs of perLane.values()) expect(seqs).toEqual([1, 2, 3]);
  expect(await laneRow(ledger, queue, 'lane-0')).toEqual({ nextSeq: 3, busy: false });
});

test('completeMany with one stale handle writes the others and reports only the stale one lost', async () => {
  const { ledger } = tl;
  const queue = freshQueue('batch-stale');
  await ledger.enqueueMany([
    { queue, type: 't', payload: 1, lane: 'a' },
    { queue, type: 't', payload: 2, lane: 'a' },
    { queue, type: 't', payload: 3 },
  ]);
  const c = await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 30_000 });
  expect(c.items.length).toBe(2);
  const [first, second] = c.items;
  if (!first || !second) throw new Error('claim returned too few');
  const stale = { ...first, leaseToken: 'not-the-token' };
  const res = await ledger.completeMany([{ handle: stale }, { handle: second }]);
  expect(res.map((r) => r.won)).toEqual([false, true]);
  expect((await mustGet(ledger, first.id)).state).toBe('processing');
  expect((await mustGet(ledger, second.id)).state).toBe('completed');
});

test('a cancel requested from a holder that then died ends the item cancelled at reclaim, not re-run', async () => {
  const { ledger } = tl;
  const queue = freshQueue('cancel-reclaim');
  const { id } = await ledger.enqueue({ queue, type: 't', payload: {}, lane: 'x' });
  await ledger.enqueue({ queue, type: 't', payload: {}, lane: 'x' });
  await claimOne(ledger, queue, 'dies', 150);
  expect(await ledger.cancel(id)).toBe('cancel_requested');
  const out = await waitFor(
    async () => {
      const r = await ledger.reclaimExpired({ queue });
      return r.cancelled.length > 0 ? r : undefined;
    },
    10_000,
    'reclaim of the expired lease',
  );
  expect(out.cancelled).toEqual([id]);
  expect(out.reclaimed).toEqual([]);
  expect((await mustGet(ledger, id)).state).toBe('cancelled');
  // The lane moved on to its second item.
  const next = await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 30_000 });
  expect(next.items.map((i) => i.laneSeq)).toEqual([2]);
});

test('a claimed item is field for field what the ledger then holds for it, by every way of claiming', async () => {
  const { ledger } = tl;
  const queue = freshQueue('claimed-view');
  const { epoch } = await ledger.activate({ queue, deployment: 'blue' });
  const [keyed, laneHead, laneNext, byId] = await ledger.enqueueMany([
    { queue, type: 't', payload: { x: 1 }, priority: -1, queueClass: 'bulk', idempotencyKey: 'k-1', maxAttempts: 4 },
    { queue, type: 't', payload: 'head', lane: 'L' },
    { queue, type: 'u', payload: ['next'], lane: 'L' },
    { queue, type: 't', payload: null, priority: 1 },
  ]);
  const owner = 'wörker ' + 'z'.repeat(80); // folded and cut as stored
  const matchesLedger = async (item: ClaimedItem): Promise<void> => {
    expect(item).toEqual(await mustGet(ledger, item.id));
  };

  const first = await ledger.claim({ queue, owner, limit: 2, leaseMs: 45_000, epoch, classes: ['bulk', 'default'] });
  expect(first.items.map((i) => i.id).sort()).toEqual([keyed!.id, laneHead!.id].sort());
  for (const item of first.items) await matchesLedger(item);

  // A second attempt: the item carries its last error and failure class.
  const held = first.items.find((i) => i.id === keyed!.id)!;
  expect((await ledger.retry(held, { error: new Error('first try failed'), delayMs: 0 })).won).toBe(true);
  const again = await ledger.claimByIds({ queue, owner, leaseMs: 30_000, ids: [keyed!.id, byId!.id] });
  expect(again.map((i) => i.attempt).sort()).toEqual([1, 2]);
  for (const item of again) await matchesLedger(item);

  // A lane successor claimed with its predecessor's completion.
  const head = first.items.find((i) => i.id === laneHead!.id)!;
  const { claimed } = await ledger.completeManyClaimingNext([{ handle: head }], {
    owner: 'affine',
    token: 'tok_affine_000001',
    leaseMs: 20_000,
    max: 4,
  });
  expect(claimed.map((i) => i.id)).toEqual([laneNext!.id]);
  await matchesLedger(claimed[0]!);
});

test('payloads and results with quotes, backslashes and control characters come back exactly', async () => {
  const { ledger } = tl;
  const queue = freshQueue('escaping');
  const tricky = [
    `it's "quoted" and \\back\\slashed\\`,
    "O'Brien\\'; DROP TABLE lw_items; --",
    'nul \u0000 ctrl-z \u001a tab \t newline \n return \r backspace \b',
    'émoji 🎉 and U+2028 \u2028 and text that looks like an escaped ' +
      'surrogate \\ud800 (a lone one is refused: ledger-validation)',
    '\\',
    "'",
  ];
  const inputs = tricky.map((s, n) => ({ queue, type: 't', payload: { n, s, nested: [s, { s }] } }));
  await ledger.enqueueMany(inputs);
  const claimed = (await ledger.claim({ queue, owner: 'w', limit: 100, leaseMs: 30_000 })).items;
  expect(claimed).toHaveLength(tricky.length);
  const byN = new Map(claimed.map((c) => [(c.payload as { n: number }).n, c]));
  for (const [n, s] of tricky.entries()) expect(byN.get(n)?.payload).toEqual({ n, s, nested: [s, { s }] });
  const results = await ledger.completeMany(
    claimed.map((c) => ({ handle: c, result: { echo: (c.payload as { s: string }).s } })),
  );
  expect(results.every((r) => r.won)).toBe(true);
  for (const c of claimed)
    expect((await mustGet(ledger, c.id)).result).toEqual({ echo: (c.payload as { s: string }).s });
});
