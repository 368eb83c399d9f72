import { afterAll, beforeAll, expect, test } from 'vitest';
import { createTestLedger, type TestLedger } from './support/ledger.js';

let tl: TestLedger;
beforeAll(async () => {
  tl = await createTestLedger();
});
afterAll(async () => {
  await tl?.drop();
});

test('smoke', async () => {
  const { ledger } = tl;
  const r = await ledger.enqueueMany([
    { queue: 'q', type: 't', payload: { a: 1 }, lane: 'L' },
    { queue: 'q', type: 't', payload: { a: 2 }, lane: 'L' },
    { queue: 'q', type: 't', payload: { a: 3 } },
  ]);
  expect(r.map((x) => x.laneSeq)).toEqual([1, 2, null]);
  const c = await ledger.claim({ queue: 'q', owner: 'w1', limit: 10, leaseMs: 30_000 });
  expect(c.items.length).toBe(2);
  for (const it of c.items) expect((await ledger.complete(it, { ok: true })).won).toBe(true);
  const c2 = await ledger.claim({ queue: 'q', owner: 'w1', limit: 10, leaseMs: 30_000 });
  expect(c2.items.map((i) => i.payload)).toEqual([{ a: 2 }]);
  console.log(await ledger.stats());
});
