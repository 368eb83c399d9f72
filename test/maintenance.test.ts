import { sql } from 'kysely';
import { afterAll, afterEach, beforeAll, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { Maintainer, TIDY_QUEUES_PER_PASS } from '../src/maintenance/maintainer.js';
import { Reconciler } from '../src/supervisor/reconciler.js';
import { wakeStreamKey } from '../src/wake/keys.js';
import { captureLog } from './support/captured-log.js';
import { createTestWake, type TestWake } from './support/engine.js';
import { claimOne, freshQueue, mustGet } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// One maintenance pass (src/maintenance), as the supervisor's reconciler and a consumer's sweep both run it.

let tl: TestLedger;
let ledger: Ledger;
let tw: TestWake | undefined;
const silent = createLogger('test', 'silent');

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
});
afterAll(async () => {
  await tl?.drop();
});
afterEach(async () => {
  await tw?.drop();
  tw = undefined;
});

/** The wake-ups in a queue's default stream, as (kind, ids). */
async function wakeUps(w: TestWake, queue: string): Promise<{ kind: string; ids: string[] }[]> {
  const entries = await w.wake.redis.xrange(wakeStreamKey(w.keyPrefix, queue, 'default'), '-', '+');
  return entries.map(([, fields]) => {
    const f = new Map<string, string>();
    for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
    return { kind: f.get('k') ?? '', ids: (f.get('i') ?? '').split(',').filter((s) => s !== '') };
  });
}

/** An item claimed under a short lease that has run out. */
async function expiredLease(queue: string): Promise<string> {
  const e = await ledger.enqueue({ queue, type: 't', payload: {} });
  const c = await claimOne(ledger, queue, 'crashed-worker', 200);
  expect(c.id).toBe(e.id);
  await waitFor(
    async () => (await ledger.now()).getTime() > c.leaseUntil.getTime() || undefined,
    5_000,
    'the lease to run out',
  );
  return c.id;
}

test('an expired lease is reclaimed and a wake-up published for it', async () => {
  tw = createTestWake();
  const queue = freshQueue('maint-reclaim');
  const id = await expiredLease(queue);
  const maintainer = new Maintainer({ ledger, wake: tw.wake, queues: [queue], log: silent });

  const before = Date.now();
  const r = await maintainer.pass();
  const after = Date.now();
  expect(r.failed).toEqual([]);
  expect(r.done).toEqual([
    {
      queue,
      reclaimStartedAtMs: expect.any(Number),
      reclaimed: [id],
      reclaimedAtMs: expect.any(Number),
      leaseExpiredDead: [],
      cancelled: [],
      probed: [],
      dependencyExpired: [],
      purged: 0,
      repairedWaits: 0,
    },
  ]);
  const { reclaimStartedAtMs, reclaimedAtMs } = r.done[0]!;
  expect(before).toBeLessThanOrEqual(r.lookedAtMs);
  expect(r.lookedAtMs).toBeLessThanOrEqual(reclaimStartedAtMs!);
  expect(reclaimStartedAtMs!).toBeLessThanOrEqual(reclaimedAtMs!);
  expect(reclaimedAtMs!).toBeLessThanOrEqual(after);
  expect(await mustGet(ledger, id)).toMatchObject({ state: 'pending', failureClass: 'lease_expired' });
  expect(await wakeUps(tw, queue)).toEqual([{ kind: 'reclaim', ids: [id] }]);

  // Nothing left to do: no further wake-up.
  expect((await maintainer.pass()).done[0]?.reclaimed).toEqual([]);
  expect(await wakeUps(tw, queue)).toHaveLength(1);
});

test('a due dependency probe is released and a wake-up published for it', async () => {
  tw = createTestWake();
  const queue = freshQueue('maint-probe');
  await ledger.enqueue({ queue, type: 't', payload: {} });
  const c = await claimOne(ledger, queue);
  expect((await ledger.block(c, { dependencyKey: `dep-${queue}`, maxWaitMs: 600_000, probeAfterMs: 3_000 })).won).toBe(
    true,
  );
  const maintainer = new Maintainer({ ledger, wake: tw.wake, queues: [queue], log: silent });
  // Not due yet (3 s: a TiDB beside stress-ng took longer than 150 ms from the block to this pass).
  expect((await maintainer.pass()).done[0]?.probed).toEqual([]);
  expect(await wakeUps(tw, queue)).toEqual([]);

  const done = await waitFor(
    async () => {
      const d = (await maintainer.pass()).done[0];
      return d && d.probed.length > 0 ? d : undefined;
    },
    15_000,
    'the probe to come due',
  );
  expect(done).toMatchObject({ queue, probed: [c.id], dependencyExpired: [], reclaimed: [] });
  expect(await mustGet(ledger, c.id)).toMatchObject({ state: 'pending', probeAfter: null });
  expect(await wakeUps(tw, queue)).toEqual([{ kind: 'dependency', ids: [c.id] }]);
});

test("a pass's failure on one queue does not stop the others", async () => {
  tw = createTestWake();
  const first = freshQueue('maint-first');
  const last = freshQueue('maint-last');
  const [a, b] = [await expiredLease(first), await expiredLease(last)];
  // A queue name the ledger refuses: its reclaim throws.
  const broken = 'Not A Queue!';
  const maintainer = new Maintainer({ ledger, wake: tw.wake, queues: [first, broken, last], log: silent });

  const r = await maintainer.pass();
  expect(r.failed.map((f) => f.queue)).toEqual([broken]);
  expect(r.failed[0]?.error).toBeInstanceOf(Error);
  expect(r.done.map((d) => [d.queue, d.reclaimed])).toEqual([
    [first, [a]],
    [last, [b]],
  ]);
  expect(await wakeUps(tw, first)).toEqual([{ kind: 'reclaim', ids: [a] }]);
  expect(await wakeUps(tw, last)).toEqual([{ kind: 'reclaim', ids: [b] }]);

  // The reconciler logs the failed queue and still refreshes its gauges.
  const log = captureLog('warn');
  let gauges = 0;
  const reconciler = new Reconciler({
    ledger,
    queues: [broken, first],
    intervalMs: 3_600_000,
    retentionMs: 0,
    log: log.logger,
    afterPass: async () => void gauges++,
  });
  const pass = await reconciler.pass();
  expect(pass.failed.map((f) => f.queue)).toEqual([broken]);
  expect(pass.done.map((d) => d.queue)).toEqual([first]);
  expect(log.at(40, /reconcile pass failed/).map((l) => l.queue)).toEqual([broken]);
  expect(gauges).toBe(1);
});

test("a consumer's maintenance sweep reclaims an expired lease and announces it", async () => {
  tw = createTestWake();
  const queue = freshQueue('maint-consumer');
  const id = await expiredLease(queue);
  const ran: string[] = [];
  const consumer = new Consumer({
    ledger,
    wake: tw.wake,
    queue,
    concurrency: 1,
    pollIntervalMs: 60_000,
    handlers: { t: async (job: { id: string }) => void ran.push(job.id) },
  });
  await consumer.start();
  try {
    await waitFor(() => (ran.length === 1 ? true : undefined), 10_000, 'the reclaimed item to run');
    expect(ran).toEqual([id]);
    // The wake-up went to the stream or straight to a consumer in this process.
    expect(tw.wake.counters.published + tw.wake.counters.deliveredLocally).toBeGreaterThanOrEqual(1);
    // The handler returned; its completion is committed by the batch completer a moment later.
    const done = await waitFor(
      async () => {
        const item = await mustGet(ledger, id);
        return item.state === 'processing' ? undefined : item;
      },
      10_000,
      'the completion to commit',
    );
    expect(done).toMatchObject({ state: 'completed', attempt: 2 });
  } finally {
    await consumer.stop();
  }
});

test('the reconciler forgets dependency wake marks idle for a day, once per pass, whatever the retention', async () => {
  const marks = ledger.tables.wakeMarks;
  await ledger.wakeDependency('mark-old');
  await ledger.wakeDependency('mark-new');
  await sql`UPDATE ${marks} SET touched_at = NOW(6) - INTERVAL 2 DAY WHERE dependency_key = 'mark-old'`.execute(
    ledger.db,
  );
  const reconciler = new Reconciler({
    ledger,
    queues: [freshQueue('maint-marks')],
    intervalMs: 3_600_000,
    retentionMs: 0,
    log: silent,
  });
  await reconciler.pass();
  const left = await sql<{
    k: string;
  }>`SELECT dependency_key AS k FROM ${marks} WHERE dependency_key IN ('mark-old', 'mark-new')`.execute(ledger.db);
  expect(left.rows.map((r) => r.k)).toEqual(['mark-new']);
});

const N = TIDY_QUEUES_PER_PASS;
const tidyTitle = `past ${N} queues, a pass purges ${N} of them and the next pass the rest`;
test(tidyTitle, async () => {
  const queues = Array.from({ length: TIDY_QUEUES_PER_PASS + 36 }, (_, i) => freshQueue(`maint-tidy${i}`));
  let lastEnd = 0;
  for (const queue of queues) {
    await ledger.enqueue({ queue, type: 't', payload: {} });
    const c = await claimOne(ledger, queue, 'w', 30_000);
    await ledger.complete(c);
    lastEnd = (await mustGet(ledger, c.id)).updatedAt.getTime();
  }
  await waitFor(async () => (await ledger.now()).getTime() > lastEnd + 5 || undefined, 5_000, 'the ends to age');
  const maintainer = new Maintainer({ ledger, queues, log: silent, retentionMs: 1 });
  const purgedIn = async () => (await maintainer.pass()).done.filter((d) => d.purged > 0).map((d) => d.queue);
  const first = await purgedIn();
  expect(first).toHaveLength(TIDY_QUEUES_PER_PASS);
  const second = await purgedIn();
  expect(new Set([...first, ...second])).toEqual(new Set(queues));
});
