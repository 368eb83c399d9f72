import { sql } from 'kysely';
import { expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import type { EnqueueInput } from '../src/ledger/ledger.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { createEffectsTable, effectHandler, readEffects, type EffectRow, type EffectsDB } from './support/effects.js';
import { uniqueQueue } from './support/engine.js';
import { waitForCount } from './support/ledger.js';
import { itemCount } from './support/items.js';
import { ChildConsumer } from './support/processes.js';
import { testScope } from './support/scope.js';
import { redisUrl } from './support/services.js';
import { exactCounts } from './support/counts.js';

const ITEMS = 5000;
const LANES = 200;
const PER_LANE = ITEMS / LANES;
const BATCH = 500;

const scope = testScope();

test(`${ITEMS} items over ${LANES} lanes, five consumers in three ` +
  `processes: each item once, lanes in order, never overlapping`, async () => {
  const tl = await scope.ledger();
  const tw = scope.wake();
  const { ledger } = tl;
  await createEffectsTable(ledger);
  const queue = uniqueQueue('fleet');

  // Two consumers in child processes (they take a moment to boot)…
  const children = [1, 2].map(
    (i) =>
      new ChildConsumer({
        dbUrl: tl.url,
        redisUrl: redisUrl(),
        keyPrefix: tw.keyPrefix,
        queue,
        name: `${queue}-child-${i}`,
        concurrency: 10,
        pollIntervalMs: 1000,
      }),
  );
  for (const c of children) scope.cleanup(() => c.kill());

  // …and three in this process, each with its own ledger pool and wake channel.
  const locals: Consumer<EffectsDB>[] = [];
  for (let i = 0; i < 3; i++) {
    const name = `${queue}-local-${i}`;
    const own = new Ledger({ url: tl.url, poolSize: 6 });
    const wake = new WakeChannel({ redis: redisUrl(), keyPrefix: tw.keyPrefix });
    scope.cleanup(() => own.close());
    scope.cleanup(() => wake.close());
    const consumer = new Consumer<EffectsDB>({
      ledger: own,
      wake,
      queue,
      name,
      concurrency: 10,
      pollIntervalMs: 1000,
      handlers: { step: effectHandler(name) },
    });
    scope.cleanup(() => consumer.stop({ drainTimeoutMs: 1000 }));
    await consumer.start();
    locals.push(consumer);
  }
  await Promise.all(children.map((c) => c.waitReady()));

  // Enqueue in lane-interleaved batches: every batch spans many lanes, each lane grows over several batches.
  const producer = new Producer({ ledger, wake: tw.wake });
  const expected = new Map<string, { lane: string; n: number; laneSeq: number | null }>();
  let pending: EnqueueInput[] = [];
  const flush = async (): Promise<void> => {
    const batch = pending;
    pending = [];
    const results = await producer.enqueueMany(batch);
    results.forEach((r, i) => {
      const input = batch[i]!;
      expect(r.duplicate).toBe(false);
      expected.set(r.id, { lane: input.lane!, n: (input.payload as { n: number }).n, laneSeq: r.laneSeq });
    });
  };
  for (let n = 0; n < PER_LANE; n++) {
    for (let l = 0; l < LANES; l++) {
      pending.push({ queue, type: 'step', lane: `lane-${l}`, payload: { n } });
      if (pending.length === BATCH) await flush();
    }
  }
  if (pending.length > 0) await flush();
  expect(expected.size).toBe(ITEMS);

  await waitForCount(() => itemCount(ledger, queue, 'completed'), ITEMS, 30_000, 'completed items');

  for (const c of locals) await c.stop({ drainTimeoutMs: 5000 });
  const exits = await Promise.all(children.map((c) => c.terminate()));
  for (const [i, e] of exits.entries()) {
    expect(e, `child ${i + 1} exit after SIGTERM; stderr: ${children[i]!.stderrTail}`).toEqual({
      code: 0,
      signal: null,
    });
  }

  // The ledger: every item completed, each in exactly one attempt, nothing else left.
  const [stats] = await ledger.stats(queue);
  expect(exactCounts(stats)).toEqual({
    pending: 0,
    processing: 0,
    blocked: 0,
    completed: ITEMS,
    skipped: 0,
    dead: 0,
    cancelled: 0,
  });
  const reruns = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items}
      WHERE queue = ${queue} AND attempt <> 1`.execute(ledger.db);
  expect(Number(reruns.rows[0]?.n)).toBe(0);
  const history = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.attempts}`.execute(
    ledger.db,
  );
  expect(Number(history.rows[0]?.n)).toBe(0);

  // The effects: exactly one row per enqueued item, with the lane position the enqueue assigned.
  const effects = await readEffects(ledger);
  expect(effects).toHaveLength(ITEMS);
  for (const e of effects) {
    const want = expected.get(e.itemId);
    expect(want, `effect of an item never enqueued: ${e.itemId}`).toBeDefined();
    expect({ lane: e.lane, n: e.enqIndex, laneSeq: e.laneSeq }).toEqual(want);
  }

  // Per lane, in the order the handlers started: enqueue order, and each run began after the previous one ended.
  const byLane = new Map<string, EffectRow[]>();
  for (const e of effects) byLane.set(e.lane!, [...(byLane.get(e.lane!) ?? []), e]);
  expect(byLane.size).toBe(LANES);
  for (const [lane, rows] of byLane) {
    rows.sort((a, b) => a.startedAtUs - b.startedAtUs);
    expect(
      rows.map((r) => r.enqIndex),
      `${lane}: run order`,
    ).toEqual([...Array(PER_LANE).keys()]);
    for (let i = 1; i < rows.length; i++) {
      const prev = rows[i - 1]!;
      const cur = rows[i]!;
      expect(cur.laneSeq!, `${lane}: lane_seq after ${prev.laneSeq}`).toBeGreaterThan(prev.laneSeq!);
      expect(
        cur.startedAtUs,
        `${lane}: item ${cur.enqIndex} started before item ${prev.enqIndex} ended`,
      ).toBeGreaterThanOrEqual(prev.endedAtUs);
    }
  }

  // Every consumer took part, and each one's completions are exactly its effect rows.
  const perWorker = new Map<string, number>();
  for (const e of effects) perWorker.set(e.worker, (perWorker.get(e.worker) ?? 0) + 1);
  const completedBy = new Map<string, number>([
    ...locals.map((c) => [c.name, c.counters.completed] as const),
    ...children.map((c) => [c.name, c.stoppedCounters?.completed ?? -1] as const),
  ]);
  expect(completedBy.size).toBe(5);
  for (const [name, completed] of completedBy) {
    expect(completed, `${name} completed nothing`).toBeGreaterThan(0);
    expect(perWorker.get(name) ?? 0, `${name}: effect rows vs completed counter`).toBe(completed);
  }
  expect([...perWorker.keys()].sort()).toEqual([...completedBy.keys()].sort());
  for (const c of [...locals.map((l) => l.counters), ...children.map((ch) => ch.stoppedCounters!)]) {
    expect({ retried: c.retried, dead: c.dead, leaseLost: c.leaseLost, abandoned: c.abandoned }).toEqual({
      retried: 0,
      dead: 0,
      leaseLost: 0,
      abandoned: 0,
    });
  }
  // A hung run fails on the stall above; the timeout only bounds a crawl (a loaded TiDB is slow).
}, 600_000);
