import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Ledger } from '../../src/ledger/ledger.js';
import { freshQueue, mustGet } from '../support/items.js';
import { createTestLedger, type TestLedger } from '../support/ledger.js';

/*
 * Sequences the state machine (ledger-state-machine.test.ts) found breaking
 * the ledger's contract, shrunk, kept as plain tests so each stays fixed.
 */

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

// docs/design.md §3/§6: each entry is its own CAS and a stale one loses alone. The laneless batch is one
// UPDATE outside a transaction; it used to complete the current entries, see a row short, and finalize every
// entry again on its own, which the completed ones lost: their holder was told `won: false`.
test('completeMany of laneless items with one stale entry reports the current one as won', async () => {
  const queue = freshQueue('laneless-partial-batch');
  await ledger.enqueueMany([
    { queue, type: 't', payload: 1 },
    { queue, type: 't', payload: 2 },
  ]);
  const [a, b] = (await ledger.claim({ queue, owner: 'w1', limit: 2, leaseMs: 60_000 })).items;
  if (!a || !b) throw new Error('expected two claimed items');
  expect((await ledger.release(b)).won).toBe(true); // b's claim is stale now
  const results = await ledger.completeMany([{ handle: a }, { handle: b }]);
  expect(results.map((r) => r.won)).toEqual([true, false]);
  expect((await mustGet(ledger, a.id)).state).toBe('completed');
  expect((await mustGet(ledger, b.id)).state).toBe('pending');
});

// The same contract from the other side: a claim that already completed its item holds it no longer, so
// completing it again loses, in a batch as alone (`complete` answers false). Reading back "completed
// under my token" after a short batch cannot tell this batch's completion from the earlier one.
test('completeMany of a claim that already completed its item reports it lost, as complete does', async () => {
  const queue = freshQueue('complete-twice');
  await ledger.enqueue({ queue, type: 't', payload: 1 });
  const [a] = (await ledger.claim({ queue, owner: 'w1', limit: 1, leaseMs: 60_000 })).items;
  if (!a) throw new Error('expected a claimed item');
  expect((await ledger.complete(a)).won).toBe(true);
  expect((await ledger.complete(a)).won).toBe(false);
  expect((await ledger.completeMany([{ handle: a }])).map((r) => r.won)).toEqual([false]);
});
