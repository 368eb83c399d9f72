import { sql } from 'kysely';
import { expect, test } from 'vitest';
import { Ledger } from '../src/ledger/ledger.js';
import { statsCountCap } from '../src/ledger/sql/operator/stats.js';
import { ITEM_STATES } from '../src/ledger/types.js';
import { exactCounts } from './support/counts.js';
import { onEveryStatement } from './support/mysql-statements.js';
import { freshQueue } from './support/items.js';
import { testTxnMode, waitFor } from './support/ledger.js';
import { testScope } from './support/scope.js';

// Stats and the gauges (docs/design/supervisor.md): bounded index ranges per queue, counted once per fleet.
const scope = testScope();

test('stats counts each queue from bounded index ranges: exact ' +
  'below the cap; at the cap a state shows the cap and says so', async () => {
  const tl = await scope.ledger();
  const big = freshQueue('stats-big');
  const small = freshQueue('stats-small');
  const cap = statsCountCap('completed');
  // One more completed item than the cap counts, written in bulk.
  for (let i = 0; i <= cap; i += 1000) {
    await tl.ledger.enqueueMany(
      Array.from({ length: Math.min(1000, cap + 1 - i) }, (_, k) => ({ queue: big, type: 't', payload: { k: i + k } })),
    );
  }
  await sql`UPDATE ${tl.ledger.tables.items} SET state = 'completed', terminal_at = NOW(6)
    WHERE queue = ${big}`.execute(tl.ledger.db);
  await tl.ledger.enqueueMany([
    { queue: big, type: 't', payload: 'waiting' },
    { queue: small, type: 't', payload: 1 },
    { queue: small, type: 't', payload: 2, lane: 'L' },
    { queue: small, type: 't', payload: 3, lane: 'L' },
  ]);
  const statements: string[] = [];
  const stop = onEveryStatement((text) => void statements.push(text));
  const stats = await tl.ledger.stats();
  stop();
  const byQueue = new Map(stats.map((s) => [s.queue, s]));
  expect([...byQueue.keys()]).toEqual([big, small].sort());
  expect(byQueue.get(big)?.counts).toMatchObject({
    completed: { count: cap, atLeast: true },
    pending: { count: 1, atLeast: false },
  });
  expect(ITEM_STATES.filter((state) => byQueue.get(big)?.counts[state].atLeast)).toEqual(['completed']);
  expect(exactCounts(byQueue.get(small))).toEqual({
    pending: 3,
    processing: 0,
    blocked: 0,
    completed: 0,
    skipped: 0,
    dead: 0,
    cancelled: 0,
  });
  expect(byQueue.get(small)?.oldestDueAgeMs).toBeGreaterThanOrEqual(0);
  // Never a GROUP BY over the table.
  expect(statements.filter((s) => /GROUP BY/i.test(s))).toEqual([]);
  // The fleet's recorded count, read back by a replica that did not count, still knows the floor from the exact.
  expect((await tl.ledger.fleetStats({ everyMs: 0 })).countedHere).toBe(true);
  const read = await tl.ledger.fleetStats({ everyMs: 3_600_000 });
  expect(read.countedHere).toBe(false);
  expect(read.stats.find((s) => s.queue === big)?.counts).toMatchObject({
    completed: { count: cap, atLeast: true },
    pending: { count: 1, atLeast: false },
  });
  expect(read.stats.find((s) => s.queue === small)?.scheduled).toEqual({ count: 0, atLeast: false });
}, 120_000);

test(
  'the fleet counts once: of replicas asking together exactly one counts, ' +
    'the others read its count, and no one counts again before everyMs',
  async () => {
    const tl = await scope.ledger();
    const queue = freshQueue('fleet-stats');
    await tl.ledger.enqueueMany([
      { queue, type: 't', payload: 1 },
      { queue, type: 't', payload: 2 },
    ]);
    const replicas = Array.from({ length: 4 }, () => new Ledger({ url: tl.url, poolSize: 2, ...testTxnMode() }));
    scope.cleanup(() => Promise.all(replicas.map((r) => r.close())));
    const EVERY_MS = 60_000;
    const first = await Promise.all(replicas.map((r) => r.fleetStats({ everyMs: EVERY_MS })));
    expect(first.filter((f) => f.countedHere)).toHaveLength(1);
    // Whoever did not count read what the counter recorded, or nothing if it asked before the count was in.
    for (const f of first)
      if (f.stats.length > 0) expect(f.stats.find((s) => s.queue === queue)?.counts.pending.count).toBe(2);
    await tl.ledger.enqueue({ queue, type: 't', payload: 3 });
    const again = await Promise.all(replicas.map((r) => r.fleetStats({ everyMs: EVERY_MS })));
    expect(again.filter((f) => f.countedHere)).toHaveLength(0);
    expect(again.map((f) => f.stats.find((s) => s.queue === queue)?.counts.pending.count)).toEqual([2, 2, 2, 2]);
    // Past everyMs (here: a task asked for every 0 ms), a replica counts again and sees the third item.
    // With 0 ms a second replica may count right after the first has recorded (on TiDB the four calls
    // do not overlap as on MariaDB): the lease keeps counts apart, not to one per round.
    const later = await waitFor(
      async () => {
        const r = await Promise.all(replicas.map((x) => x.fleetStats({ everyMs: 0 })));
        return r.some((f) => f.countedHere) ? r : undefined;
      },
      10_000,
      'a recount',
    );
    for (const f of later.filter((x) => x.countedHere))
      expect(f.stats.find((s) => s.queue === queue)?.counts.pending.count).toBe(3);
  },
);

test('stats counts the pending items not due yet apart: scheduled', async () => {
  const tl = await scope.ledger();
  const queue = freshQueue('stats-scheduled');
  await tl.ledger.enqueueMany([
    ...[0, 1].map((n) => ({ queue, type: 't', payload: { n } })),
    ...[2, 3, 4].map((n) => ({ queue, type: 't', payload: { n }, delayMs: 3_600_000 })),
  ]);
  const [s] = await tl.ledger.stats(queue);
  expect(s).toMatchObject({
    queue,
    scheduled: { count: 3, atLeast: false },
    counts: { pending: { count: 5, atLeast: false } },
  });
});
