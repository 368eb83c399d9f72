import { afterAll, beforeAll, expect, test } from 'vitest';
import type { Ledger } from '../src/ledger/ledger.js';
import { freshQueue, laneRow, mustGet, withForeignToken } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';
import { onEveryStatement } from './support/mysql-statements.js';

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});

/** Runs `fn` and returns the statement texts it sent. */
async function statementsOf(fn: () => Promise<unknown>): Promise<string[]> {
  const sent: string[] = [];
  const stop = onEveryStatement((text) => void sent.push(text));
  try {
    await fn();
  } finally {
    stop();
  }
  return sent;
}

test('a laned completion batch is one round trip: each lane passes to its successor, laneless ones too', async () => {
  const queue = freshQueue('laned-done');
  const r = await ledger.enqueueMany([
    { queue, type: 't', payload: 'a1', lane: 'A' },
    { queue, type: 't', payload: 'a2', lane: 'A' },
    { queue, type: 't', payload: 'b1', lane: 'B' },
    { queue, type: 't', payload: 'b2', lane: 'B' },
    { queue, type: 't', payload: 'b3', lane: 'B' },
    { queue, type: 't', payload: 'd1', lane: 'D' },
    { queue, type: 't', payload: 'x' },
  ]);
  const id = (p: string): string => r[['a1', 'a2', 'b1', 'b2', 'b3', 'd1', 'x'].indexOf(p)]!.id;
  const heads = (await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
  expect(heads.map((h) => h.payload).sort()).toEqual(['a1', 'b1', 'd1', 'x']);
  let results: Awaited<ReturnType<Ledger['completeManyClaimingNext']>>['results'] = [];
  const sent = await statementsOf(async () => {
    results = (await ledger.completeManyClaimingNext(heads.map((handle) => ({ handle })))).results;
  });
  expect(sent, sent.map((s) => s.slice(0, 60)).join('\n')).toHaveLength(1);
  expect(results.every((x) => x.won)).toBe(true);
  const advanced = Object.fromEntries(heads.map((h, i) => [h.payload as string, results[i]!.laneAdvanced]));
  expect(advanced).toEqual({ a1: true, b1: true, d1: false, x: undefined });
  expect(await mustGet(ledger, id('a2'))).toMatchObject({ state: 'pending', isHead: true });
  expect(await mustGet(ledger, id('b2'))).toMatchObject({ state: 'pending', isHead: true });
  expect(await mustGet(ledger, id('b3'))).toMatchObject({ state: 'pending', isHead: false });
  expect(await laneRow(ledger, queue, 'A')).toEqual({ nextSeq: 2, busy: true });
  expect(await laneRow(ledger, queue, 'B')).toEqual({ nextSeq: 3, busy: true });
  expect(await laneRow(ledger, queue, 'D')).toEqual({ nextSeq: 1, busy: false });
  const next = (await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
  expect(next.map((i) => i.payload).sort()).toEqual(['a2', 'b2']);
});

test.each([
  ['a lost CAS', true, false],
  ['a cancelled successor', false, true],
  ['both', true, true],
])(
  'a laned batch with %s takes the general path: a lost CAS leaves ' +
    'its lane as it was, a cancelled successor passes the lane on',
  async (_label, stale, cancelled) => {
    const queue = freshQueue('laned-rare');
    const r = await ledger.enqueueMany([
      { queue, type: 't', payload: 'a1', lane: 'A' },
      { queue, type: 't', payload: 'a2', lane: 'A' },
      { queue, type: 't', payload: 'b1', lane: 'B' },
      { queue, type: 't', payload: 'b2', lane: 'B' },
      { queue, type: 't', payload: 'b3', lane: 'B' },
      { queue, type: 't', payload: 'c1', lane: 'C' },
      { queue, type: 't', payload: 'c2', lane: 'C' },
      { queue, type: 't', payload: 'x' },
    ]);
    const id = (p: string): string => r[['a1', 'a2', 'b1', 'b2', 'b3', 'c1', 'c2', 'x'].indexOf(p)]!.id;
    if (cancelled) expect(await ledger.cancel(id('b2'))).toBe('cancelled');
    const heads = (await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
    const byPayload = new Map(heads.map((h) => [h.payload as string, h]));
    const order = ['a1', 'b1', 'c1', 'x'];
    const handles = order.map((p) => (stale && p === 'c1' ? withForeignToken(byPayload.get(p)!) : byPayload.get(p)!));
    const { results } = await ledger.completeManyClaimingNext(handles.map((handle) => ({ handle })));
    expect(results.map((x) => x.won)).toEqual([true, true, !stale, true]);
    expect(await mustGet(ledger, id('a2'))).toMatchObject({ state: 'pending', isHead: true });
    expect(await laneRow(ledger, queue, 'A')).toEqual({ nextSeq: 2, busy: true });
    // A cancelled b2 passes the lane to b3.
    expect(await mustGet(ledger, id(cancelled ? 'b3' : 'b2'))).toMatchObject({ state: 'pending', isHead: true });
    expect(await laneRow(ledger, queue, 'B')).toEqual({ nextSeq: 3, busy: true });
    // c1's completion lost: c1 still runs for its real holder, and c2 still waits behind it.
    expect(await mustGet(ledger, id('c1'))).toMatchObject({ state: stale ? 'processing' : 'completed' });
    expect(await mustGet(ledger, id('c2'))).toMatchObject({ state: 'pending', isHead: !stale });
    expect(await laneRow(ledger, queue, 'C')).toEqual({ nextSeq: 2, busy: true });
    const next = (await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
    expect(next.map((i) => i.payload).sort()).toEqual(['a2', cancelled ? 'b3' : 'b2', ...(stale ? [] : ['c2'])]);
  },
);

test(
  'successors claimed with a laned completion: up to the claim room, ' +
    'due and of its types only, read back in the same round trip',
  async () => {
    const queue = freshQueue('laned-affinity');
    const lanes = ['A', 'B', 'C', 'D', 'E'];
    await ledger.enqueueMany(
      lanes.flatMap((lane) => [
        { queue, type: 't', payload: `${lane}1`, lane },
        lane === 'B'
          ? { queue, type: 't', payload: `${lane}2`, lane, delayMs: 60_000 }
          : { queue, type: lane === 'C' ? 'other' : 't', payload: `${lane}2`, lane },
      ]),
    );
    const heads = (await ledger.claim({ queue, owner: 'w', limit: 10, leaseMs: 60_000 })).items;
    expect(heads).toHaveLength(5);
    const next = { owner: 'w2', token: 'tok_laned_affinity_01', leaseMs: 60_000, max: 2, types: ['t'] };
    let done: Awaited<ReturnType<Ledger['completeManyClaimingNext']>> | undefined;
    const sent = await statementsOf(async () => {
      done = await ledger.completeManyClaimingNext(
        heads.map((handle) => ({ handle })),
        next,
      );
    });
    expect(sent).toHaveLength(1);
    expect(done?.results.every((x) => x.won)).toBe(true);
    // B2 is not due and C2 is of another type: of A2, D2 and E2, two are taken.
    const took = (done?.claimed ?? []).map((c) => c.payload as string).sort();
    expect(took).toHaveLength(2);
    for (const p of took) expect(['A2', 'D2', 'E2']).toContain(p);
    for (const c of done?.claimed ?? []) {
      expect(c).toMatchObject({ state: 'processing', attempt: 1, leaseToken: next.token, isHead: true });
      expect(await ledger.get(c.id)).toMatchObject({ state: 'processing', attempt: 1, leaseToken: next.token });
    }
    const advanced = new Map(heads.map((h, i) => [h.payload as string, done?.results[i]?.laneAdvanced]));
    for (const lane of lanes) expect(advanced.get(`${lane}1`), lane).toBe(!took.includes(`${lane}2`));
    const rest = (await ledger.claim({ queue, owner: 'w3', limit: 10, leaseMs: 60_000 })).items
      .map((i) => i.payload as string)
      .sort();
    expect(rest).toEqual(['A2', 'C2', 'D2', 'E2'].filter((p) => !took.includes(p)));
  },
);
