import { afterAll, beforeAll, expect, test } from 'vitest';
import { BatchCompleter, type SuccessorRoom } from '../src/consumer/completer.js';
import type { CompletionLedger } from '../src/consumer/ledger-port.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { freshQueue, mustGet } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

let tl: TestLedger;
beforeAll(async () => {
  tl = await createTestLedger();
});
afterAll(async () => {
  await tl?.drop();
});

interface Write {
  size: number;
  laned: number;
  /** Writes of the same kind (laned or not) in flight when this one began, itself included. */
  inFlight: number;
}

/**
 * A completion ledger that records each batch the completer hands it and forwards it to the
 * real ledger, which writes it.
 */
function recordingLedger(): { ledger: CompletionLedger; writes: Write[] } {
  const real = tl.ledger;
  const writes: Write[] = [];
  const open = { laned: 0, laneless: 0 };
  const ledger: CompletionLedger = {
    async completeManyClaimingNext(entries, next) {
      const laned = entries.filter((e) => e.handle.lane !== null).length;
      const kind = laned > 0 ? 'laned' : 'laneless';
      open[kind]++;
      writes.push({ size: entries.length, laned, inFlight: open[kind] });
      try {
        return await real.completeManyClaimingNext(entries, next);
      } finally {
        open[kind]--;
      }
    },
  };
  return { ledger, writes };
}

async function claimAll(queue: string, count: number): Promise<ClaimedItem[]> {
  const items: ClaimedItem[] = [];
  while (items.length < count) {
    const c = await tl.ledger.claim({ queue, owner: 'w', limit: 1000, leaseMs: 60_000 });
    if (c.items.length === 0) break;
    items.push(...c.items);
  }
  return items;
}

test('laneless completions go in batches of up to 500, one at a time; laned ones apart, 128 at most', async () => {
  const { ledger } = tl;
  const queue = freshQueue('completer');
  const loners = 1_100;
  const lanes = 300;
  await ledger.enqueueMany(Array.from({ length: loners }, (_, n) => ({ queue, type: 't', payload: { n } })));
  await ledger.enqueueMany(
    Array.from({ length: lanes }, (_, n) => ({ queue, type: 't', payload: { n }, lane: `lane-${n}` })),
  );
  const items = await claimAll(queue, loners + lanes);
  expect(items.length).toBe(loners + lanes);

  const recording = recordingLedger();
  const completer = new BatchCompleter(recording.ledger);
  // All in one turn of the event loop, the way a burst of handlers settles.
  const results = await Promise.all(items.map((item) => completer.complete(item, { done: item.id })));
  expect(results.every((r) => r.won && r.state === 'completed')).toBe(true);
  const { writes } = recording;

  const laneless = writes.filter((w) => w.laned === 0);
  const laned = writes.filter((w) => w.laned > 0);
  expect(laned.every((w) => w.laned === w.size)).toBe(true); // never mixed
  expect(laneless.map((w) => w.size)).toEqual([500, 500, 100]);
  expect(Math.max(...laneless.map((w) => w.inFlight))).toBe(1);
  expect(laned.map((w) => w.size).sort((a, b) => b - a)).toEqual([128, 128, 44]);
  expect(Math.max(...laned.map((w) => w.inFlight))).toBe(2);
  for (const item of [items[0]!, items.at(-1)!]) {
    const stored = await mustGet(ledger, item.id);
    expect(stored.state).toBe('completed');
    expect(stored.result).toEqual({ done: item.id });
  }
});

test("a keyed batch gathers several consumers' ends and hands each, under its lease, what its ends admit", async () => {
  const queue = freshQueue('completerrooms');
  await tl.ledger.setConcurrencyLimit(queue, 1);
  // 20 keys, each with one item admitted and one waiting.
  const made = await tl.ledger.enqueueMany(
    Array.from({ length: 40 }, (_, n) => ({ queue, type: 't', concurrencyKey: `k${n % 20}`, payload: { n } })),
  );
  const held = await claimAll(queue, 20);
  expect(held).toHaveLength(20);
  const accepted = new Map<string, ClaimedItem[]>();
  const roomOf =
    (name: string): SuccessorRoom =>
    (wanted) => ({
      source: 'key-successor',
      lease: {
        owner: name,
        token: `tok_${name}_room_${wanted}_0000000`.slice(0, 24),
        leaseMs: 60_000,
        max: wanted,
        classes: ['default'],
      },
      accept: (items) => accepted.set(name, [...(accepted.get(name) ?? []), ...items]),
      cancel: () => undefined,
    });
  const a = new BatchCompleter(tl.ledger, roomOf('a'));
  const b = new BatchCompleter(tl.ledger, roomOf('b'));
  // In one turn: a's consumer ends 12 of them, b's 8; the process's keyed lines gather both.
  const results = await Promise.all(held.map((h, i) => (i < 12 ? a : b).complete(h, undefined)));
  expect(results.every((r) => r.won)).toBe(true);
  expect(accepted.get('a')).toHaveLength(12);
  expect(accepted.get('b')).toHaveLength(8);
  for (const [name, items] of accepted)
    for (const item of items) expect(item.leaseToken.startsWith(`tok_${name}_`)).toBe(true);
  const waiting = made.filter((m) => !held.some((h) => h.id === m.id)).map((m) => m.id);
  expect([...(accepted.get('a') ?? []), ...(accepted.get('b') ?? [])].map((c) => c.id).sort()).toEqual(waiting.sort());
});
