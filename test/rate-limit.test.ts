import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { RateLimitedError } from '../src/consumer/errors.js';
import { defineHandler } from '../src/consumer/types.js';
import { ValidationError } from '../src/errors.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// Per-key rate limits held by the ledger (docs/design/consumer.md, "Rate limits").

let tl: TestLedger;
let tw: TestWake;
const consumers: Consumer[] = [];
beforeAll(async () => {
  tl = await createTestLedger();
  tw = createTestWake();
});
afterEach(async () => {
  await Promise.all(consumers.splice(0).map((c) => c.stop({ drainTimeoutMs: 5_000 })));
});
afterAll(async () => {
  await tw?.drop();
  await tl?.drop();
});

interface Call {
  api: string;
  n: number;
}

/** Starts of `queue`'s items of one api, on the ledger's clock (a granted start stamps started_at), in order. */
async function startsOf(queue: string, api: string): Promise<{ at: number; attempt: number }[]> {
  const r = await sql<{ started_at: Date; attempt: number }>`SELECT started_at, attempt FROM ${tl.ledger.tables.items}
    WHERE queue = ${queue} AND state = 'completed' AND JSON_UNQUOTE(JSON_EXTRACT(payload, '$.api')) = ${api}
    ORDER BY started_at`.execute(tl.ledger.db);
  return r.rows.map((x) => ({ at: x.started_at.getTime(), attempt: x.attempt }));
}

/** The most starts in any window of `windowMs` (half open). */
function busiestWindow(starts: readonly number[], windowMs: number): number {
  let most = 0;
  let from = 0;
  for (let i = 0; i < starts.length; i++) {
    while (starts[i]! - starts[from]! >= windowMs) from++;
    most = Math.max(most, i - from + 1);
  }
  return most;
}

test(
  '4 consumers under a limit of 10/s per key: no second of the ledger clock has more ' +
    'than 10 starts of a key, another key runs at its own rate, and no attempt is spent',
  async () => {
    const queue = uniqueQueue('rate');
    let released = 0;
    const call = defineHandler<Call>({
      rateLimit: { key: (p) => `api:${p.api}`, max: 10, perMs: 1000 },
      handle: async () => undefined,
    });
    for (let i = 0; i < 4; i++) {
      const c = new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 8, handlers: { call } });
      c.on('outcome', (_item, outcome) => void (outcome === 'released' && released++));
      consumers.push(c);
      await c.start();
    }
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    await producer.enqueueMany([
      ...Array.from({ length: 200 }, (_, n) => ({ queue, type: 'call', payload: { api: 'a', n } })),
      ...Array.from({ length: 60 }, (_, n) => ({ queue, type: 'call', payload: { api: 'b', n } })),
    ]);
    const done = async (api: string): Promise<number> => (await startsOf(queue, api)).length;
    // Key b has its own window: its 60 (6 s at 10/s) do not wait for key a's 200 (20 s at 10/s). Before b's
    // first start, each of a's 200 is refused once (a claim, a take, a turn and a release): 10/s rather than
    // 20/s keeps a's run long beside that cost, which a loaded machine stretches to seconds.
    await waitFor(async () => ((await done('b')) === 60 ? true : undefined), 60_000, "key b's items");
    await waitFor(async () => ((await done('a')) === 200 ? true : undefined), 90_000, "key a's items");
    // In the ledger's order of starts, not by when this test looked: b's last start came before a's last.
    const [startsA, startsB] = [await startsOf(queue, 'a'), await startsOf(queue, 'b')];
    const lastB = startsB[startsB.length - 1]!.at;
    expect(
      startsA.filter((s) => s.at > lastB).length,
      `a's starts after b's last (b's 60 ended ${lastB - startsA[0]!.at} ms after a's first start)`,
    ).toBeGreaterThan(0);

    for (const api of ['a', 'b']) {
      const starts = await startsOf(queue, api);
      expect(
        busiestWindow(
          starts.map((s) => s.at),
          1000,
        ),
      ).toBeLessThanOrEqual(10);
      const spent = await sql<{
        id: string;
        attempt: number;
      }>`SELECT id, attempt FROM ${tl.ledger.tables.items} WHERE queue = ${queue} AND attempt <> 1`.execute(
        tl.ledger.db,
      );
      const histories = await Promise.all(
        spent.rows.map(async (r) => ({
          ...r,
          history: (await tl.ledger.inspect(r.id))?.attempts.map((h) => `${h.outcome}:${h.error ?? ''}`),
        })),
      );
      expect(histories).toEqual([]);
    }
    // Refused items wait for a turn of their own: about one release each at most, no busy polling.
    expect(released).toBeLessThanOrEqual(260 * 2);
  },
);

test("a handler's RateLimitedError pushes its key's next start back for the whole fleet", async () => {
  const queue = uniqueQueue('rate-push');
  let thrown = false;
  const call = defineHandler<Call>({
    rateLimit: { key: (p) => p.api, max: 100, perMs: 1000 },
    handle: async (job) => {
      if (job.payload.n === 0 && !thrown) {
        thrown = true;
        throw new RateLimitedError({ retryAfterMs: 1500 });
      }
    },
  });
  for (let i = 0; i < 2; i++) {
    const c = new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 4, handlers: { call } });
    consumers.push(c);
    await c.start();
  }
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  const first = await producer.enqueue({ queue, type: 'call', payload: { api: 'x', n: 0 } });
  await waitFor(() => thrown || undefined, 10_000, 'the first call to be told to back off');
  const pushedFrom = (await tl.ledger.get(first.id))!.startedAt!.getTime();
  await producer.enqueueMany(
    Array.from({ length: 5 }, (_, k) => ({ queue, type: 'call', payload: { api: 'x', n: k + 1 } })),
  );
  await waitFor(async () => ((await startsOf(queue, 'x')).length === 6 ? true : undefined), 20_000, 'all six');
  const starts = await startsOf(queue, 'x');
  // Every start after the push, the first item's retry among them, is 1.5 s or more after the pushed start.
  expect(starts.every((s) => s.at >= pushedFrom + 1500)).toBe(true);
  // The retry of the item told to back off spent no attempt.
  expect((await tl.ledger.get(first.id))?.attempt).toBe(1);
});

test('an item over its limit waits for its turn in pending, its attempt not spent, and explain says so', async () => {
  const queue = uniqueQueue('rate-why');
  const slow = defineHandler<{ n: number }>({ rateLimit: { max: 1, perMs: 60_000 }, handle: async () => undefined });
  const c = new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 2, handlers: { slow } });
  consumers.push(c);
  await c.start();
  const [a, b] = await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueueMany(
    [0, 1].map((n) => ({ queue, type: 'slow', payload: { n } })),
  );
  const waiting = await waitFor(
    async () => {
      const items = await Promise.all([a!, b!].map(async (x) => (await tl.ledger.get(x.id))!));
      const done = items.filter((i) => i.state === 'completed');
      const turn = items.find((i) => i.state === 'pending' && i.runAfter.getTime() > Date.now() + 30_000);
      return done.length === 1 && turn !== undefined ? turn : undefined;
    },
    10_000,
    'one item run, the other sent back to wait for its turn',
  );
  expect(waiting.attempt).toBe(0);
  const why = await tl.ledger.explain(waiting.id);
  expect(why).toMatchObject({ code: 'rate_limited', details: { until: waiting.runAfter.toISOString() } });
});

test(
  "key: 'concurrencyKey' gives each of an item's concurrency keys " +
    "its own window; items without a key share their type's",
  async () => {
    const queue = uniqueQueue('rate-ckey');
    const call = defineHandler<Call>({
      rateLimit: { key: 'concurrencyKey', max: 10, perMs: 1000 },
      handle: async () => undefined,
    });
    for (let i = 0; i < 2; i++) {
      const c = new Consumer({ ledger: tl.ledger, wake: tw.wake, queue, concurrency: 8, handlers: { call } });
      consumers.push(c);
      await c.start();
    }
    const byKey = { t1: 'tenant:1', t2: 'tenant:2', none: null } as const;
    await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueueMany(
      Object.entries(byKey).flatMap(([api, concurrencyKey]) =>
        Array.from({ length: 15 }, (_, n) => ({
          queue,
          type: 'call',
          payload: { api, n },
          ...(concurrencyKey === null ? {} : { concurrencyKey }),
        })),
      ),
    );
    await waitFor(
      async () =>
        (await Promise.all(Object.keys(byKey).map((api) => startsOf(queue, api)))).every((s) => s.length === 15)
          ? true
          : undefined,
      30_000,
      'every item',
    );
    const windows = await Promise.all(
      Object.keys(byKey).map(async (api) =>
        busiestWindow(
          (await startsOf(queue, api)).map((s) => s.at),
          1000,
        ),
      ),
    );
    expect(windows.every((w) => w <= 10)).toBe(true);
    // Three windows, one per concurrency key and the type's for items without one.
    const rows = await sql<{
      rate_key: string;
    }>`SELECT rate_key FROM ${tl.ledger.tables.rateLimits} WHERE queue = ${queue} ORDER BY rate_key`.execute(
      tl.ledger.db,
    );
    expect(rows.rows.map((r) => r.rate_key)).toEqual(['call', 'key:tenant:1', 'key:tenant:2']);
  },
);

test('a bad rateLimit is refused naming its field', () => {
  const make = (rateLimit: unknown) =>
    new Consumer({
      ledger: tl.ledger,
      queue: 'q',
      handlers: { t: { handle: async () => undefined, rateLimit } as never },
    });
  expect(() => make({ max: 0, perMs: 1000 })).toThrow(
    expect.objectContaining({ fields: ['handlers.t.rateLimit.max'] }),
  );
  expect(() => make({ max: 5, perMs: 1.5 })).toThrow(ValidationError);
  expect(() => make({ max: 5, perMs: 1000, key: 'tenant' })).toThrow(
    expect.objectContaining({ fields: ['handlers.t.rateLimit.key'] }),
  );
});
