import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { freshQueue } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// The fleet cap, maxProcessing, held by the ledger in each claim's transaction
// (docs/design/consumer.md, "The fleet cap").

let tl: TestLedger;
let tw: TestWake | undefined;
const consumers: Consumer[] = [];
beforeAll(async () => {
  tl = await createTestLedger();
});
afterEach(async () => {
  for (const c of consumers.splice(0)) await c.stop({ drainTimeoutMs: 5_000 });
  await tw?.drop();
  tw = undefined;
});
afterAll(async () => {
  await tl?.drop();
});

async function processingCount(queue: string): Promise<number> {
  return tl.ledger.countProcessing(queue);
}

/**
 * The most of `queue`'s completed items that were processing at once, from when each was claimed and
 * completed on the ledger's clock (an end at the instant of a start comes first). Each ran once: the
 * item's started_at and terminal_at bound its one attempt.
 */
async function peakOverlap(queue: string): Promise<number> {
  const rows = await sql<{
    started_at: Date;
    terminal_at: Date;
    attempt: number;
  }>`SELECT started_at, terminal_at, attempt
    FROM lw_items WHERE queue = ${queue} AND state = 'completed'`.execute(tl.ledger.db);
  expect(rows.rows.every((r) => r.attempt === 1)).toBe(true);
  const events = rows.rows.flatMap((r) => [
    { at: r.started_at.getTime(), d: 1 },
    { at: r.terminal_at.getTime(), d: -1 },
  ]);
  events.sort((a, b) => a.at - b.at || a.d - b.d);
  let now = 0;
  let peak = 0;
  for (const e of events) peak = Math.max(peak, (now += e.d));
  return peak;
}

describe('the fleet cap at the ledger', () => {
  test('16 claims at once, by head search and by id, never take the queue past its cap', async () => {
    const queue = freshQueue('cap');
    const items = await tl.ledger.enqueueMany(
      Array.from({ length: 60 }, (_, i) => ({ queue, type: 't', payload: { i } })),
    );
    const ids = items.map((i) => i.id);
    const claims = await Promise.all(
      Array.from({ length: 16 }, (_, k) =>
        k % 2 === 0
          ? tl.ledger.claim({ queue, owner: `w${k}`, limit: 3, leaseMs: 60_000, maxProcessing: 5 }).then((r) => r.items)
          : tl.ledger.claimByIds({
              queue,
              owner: `w${k}`,
              leaseMs: 60_000,
              maxProcessing: 5,
              ids: ids.slice(k * 3, k * 3 + 3),
            }),
      ),
    );
    const won = claims.flat();
    expect(won).toHaveLength(5);
    expect(new Set(won.map((w) => w.id)).size).toBe(5);
    expect(await processingCount(queue)).toBe(5);
    // Two finish: there is room for exactly two more.
    for (const w of won.slice(0, 2)) expect(await tl.ledger.complete(w)).toMatchObject({ won: true });
    const again = await Promise.all(
      Array.from({ length: 8 }, (_, k) =>
        tl.ledger.claim({ queue, owner: `v${k}`, limit: 4, leaseMs: 60_000, maxProcessing: 5 }).then((r) => r.items),
      ),
    );
    expect(again.flat()).toHaveLength(2);
    expect(await processingCount(queue)).toBe(5);
  });

  test('at the cap no fresh item is admitted; an expired lease, once reclaimed, is the next one admitted', async () => {
    const queue = freshQueue('stale');
    const held = await tl.ledger.enqueueMany([0, 1].map((i) => ({ queue, type: 't', payload: { held: i } })));
    const dead = (await tl.ledger.claim({ queue, owner: 'dead-holder', limit: 2, leaseMs: 400, maxProcessing: 2 }))
      .items;
    expect(dead.map((d) => d.id).sort()).toEqual(held.map((h) => h.id).sort());
    await tl.ledger.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ queue, type: 't', payload: { fresh: i } })));
    expect((await tl.ledger.claim({ queue, owner: 'w', limit: 5, leaseMs: 60_000, maxProcessing: 2 })).items).toEqual(
      [],
    );
    // The dead holder's leases expire; the sweep takes them back whatever the cap.
    await waitFor(
      async () => ((await tl.ledger.reclaimExpired({ queue })).reclaimed.length > 0 ? true : undefined),
      10_000,
      'the expired leases reclaimed',
    );
    const first = (await tl.ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 60_000, maxProcessing: 2 })).items;
    const second = (await tl.ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 60_000, maxProcessing: 2 })).items;
    expect([...first, ...second].map((c) => c.id).sort()).toEqual(held.map((h) => h.id).sort());
    expect((await tl.ledger.claim({ queue, owner: 'w', limit: 5, leaseMs: 60_000, maxProcessing: 2 })).items).toEqual(
      [],
    );
  });

  test("a coalesced group's members count against the cap", async () => {
    const queue = freshQueue('capgroup');
    await tl.ledger.enqueueMany(
      Array.from({ length: 6 }, (_, i) => ({ queue, type: 'upd', lane: 'entity', payload: { i } })),
    );
    const coalesce = { types: { upd: { mode: 'all' as const, max: 100 } }, maxBytes: 1 << 20 };
    const [head] = (await tl.ledger.claim({ queue, owner: 'w', limit: 4, leaseMs: 60_000, maxProcessing: 3, coalesce }))
      .items as [ClaimedItem];
    expect(head.group?.ids).toHaveLength(2);
    expect(head.group?.payloads).toEqual([{ i: 0 }, { i: 1 }, { i: 2 }]);
    expect(await processingCount(queue)).toBe(3);
  });
});

describe('the fleet cap with consumers', () => {
  test('8 consumers of 4 slots never have over maxProcessing 5 items processing, on the ledger clock', async () => {
    tw = createTestWake();
    const queue = uniqueQueue('capped');
    const handler = (): Promise<void> => new Promise((r) => setTimeout(r, 15));
    for (let i = 0; i < 8; i++) {
      const c = new Consumer({
        ledger: tl.ledger,
        wake: tw.wake,
        queue,
        concurrency: 4,
        maxProcessing: 5,
        handlers: { t: handler },
      });
      consumers.push(c);
      await c.start();
    }
    await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueueMany(
      Array.from({ length: 150 }, (_, i) => ({ queue, type: 't', payload: { i } })),
    );
    await waitFor(
      async () => ((await tl.ledger.stats(queue))[0]?.counts.completed.count === 150 ? true : undefined),
      60_000,
      'all 150 done',
    );
    const peak = await peakOverlap(queue);
    expect(peak).toBeLessThanOrEqual(5);
    // The cap is what held them back, not a lack of work: it was reached.
    expect(peak).toBe(5);
  });
});
