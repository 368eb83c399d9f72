import { createConnection, type RowDataPacket } from 'mysql2/promise';
import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Producer } from '../src/producer/producer.js';
import { createEffectsTable, effectHandler, readEffects, type EffectsDB } from './support/effects.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { mysqlServerUrl } from './support/services.js';

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
let consumer: Consumer<EffectsDB> | undefined;
afterEach(async () => {
  await consumer?.stop({ drainTimeoutMs: 5_000 });
  await tw?.drop();
  await tl?.drop();
});

/** Kills every server connection of `database` (the consumer's pool, mid-query or idle). */
async function killConnections(database: string): Promise<number> {
  const u = new URL(mysqlServerUrl());
  const admin = await createConnection({
    host: u.hostname,
    port: Number(u.port || 3306),
    user: decodeURIComponent(u.username || 'root'),
    password: decodeURIComponent(u.password),
  });
  try {
    const [rows] = await admin.query<RowDataPacket[]>(
      'SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()',
      [database],
    );
    for (const r of rows) await admin.query(`KILL ${Number(r.id)}`).catch(() => undefined);
    return rows.length;
  } finally {
    await admin.end();
  }
}

test('dropped database connections mid-run lose nothing and duplicate nothing', async () => {
  tl = await createTestLedger({ poolSize: 6 });
  tw = createTestWake();
  await createEffectsTable(tl.ledger);
  const queue = uniqueQueue('dbfault');
  consumer = new Consumer<EffectsDB>({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 8,
    leaseMs: 3_000,
    pollIntervalMs: 300,
    backoff: { baseMs: 20, factor: 2, maxMs: 200, jitter: 0 },
    handlers: { step: effectHandler('w', { maxWorkMs: 3 }) },
  });
  await consumer.start();
  const total = 1_500;
  await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueueMany(
    Array.from({ length: total }, (_, i) => ({
      queue,
      type: 'step',
      lane: `L${i % 50}`,
      payload: { n: Math.floor(i / 50) },
      maxAttempts: 25,
    })),
  );

  // Cut every connection of the database each time another 150 items have finished.
  let killed = 0;
  for (let mark = 150; mark <= 1_050; mark += 150) {
    await waitFor(() => (consumer!.counters.completed >= mark ? true : undefined), 60_000, `${mark} completions`);
    killed += await killConnections(tl.database);
  }
  expect(killed).toBeGreaterThan(0);

  const done = async (): Promise<true | undefined> => {
    try {
      const [s] = await tl!.ledger.stats(queue);
      return s?.counts.completed.count === total ? true : undefined;
    } catch {
      return undefined; // this connection may have been one of the killed ones
    }
  };
  await waitFor(done, 60_000, 'every item completed');
  const effects = await readEffects(tl.ledger);
  expect(effects.length).toBe(total);
  expect(new Set(effects.map((e) => e.itemId)).size).toBe(total);
  const byLane = new Map<string, number[]>();
  for (const e of [...effects].sort((a, b) => a.startedAtUs - b.startedAtUs))
    byLane.set(e.lane ?? '', [...(byLane.get(e.lane ?? '') ?? []), e.laneSeq ?? -1]);
  for (const [lane, seqs] of byLane) expect(seqs, lane).toEqual([...seqs].sort((a, b) => a - b));
  const [stats] = await tl.ledger.stats(queue);
  expect(stats?.counts.dead.count).toBe(0);
}, 120_000);
