import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { defineBatchHandler } from '../src/consumer/batches.js';
import { Defer, SkipError } from '../src/consumer/errors.js';
import { defineHandler, type Job, type JobContext } from '../src/consumer/types.js';
import { LanewakeMetrics } from '../src/supervisor/metrics.js';
import { captureLog } from './support/captured-log.js';
import { consumerHarness } from './support/consumer-harness.js';
import { history, itemCount, mustGet } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { createStepEffectsTable } from './support/step-effects.js';

// What a team moving off the origin workers needs of a handler (docs/design/origin-mapping.md, Mapping from the
// origin workers): a skip outcome, `job.coalesced` on every run of a coalescing type, named stages
// timed, and a Defer that backs off by the engine's policy.

const harness = consumerHarness('origin');

/** A metric's sample value in the Prometheus text, by its exact label set; undefined when absent. */
function sample(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('skip', () => {
  test(
    'SkipError and ctx.skip end items skipped with their reason; the ' +
      'lane passes on; counters, metrics, stats and inspect count them',
    async () => {
      const { tl, queue, producer } = await harness.setUp();
      const ran: number[] = [];
      const metrics = new LanewakeMetrics({ defaultMetrics: false });
      const consumer = await harness.consumer({
        sync: async (job: Job<{ n: number; active: boolean; match: boolean }>, ctx: JobContext) => {
          ran.push(job.payload.n);
          if (!job.payload.match) throw new SkipError('filter does not match');
          if (!job.payload.active) ctx.skip('source inactive');
          return 'synced';
        },
      });
      harness.cleanup(metrics.observeConsumer(consumer));
      const payloads = [
        { n: 0, active: true, match: false },
        { n: 1, active: false, match: true },
        { n: 2, active: true, match: true },
      ];
      const ids: string[] = [];
      for (const payload of payloads)
        ids.push((await producer.enqueue({ queue, type: 'sync', lane: 'source:1', payload, maxAttempts: 3 })).id);
      await waitFor(
        async () => ((await mustGet(tl.ledger, ids[2]!)).state === 'completed' ? true : undefined),
        15_000,
        'the lane ran through',
      );

      expect(ran).toEqual([0, 1, 2]);
      const [a, b, c] = [
        await mustGet(tl.ledger, ids[0]!),
        await mustGet(tl.ledger, ids[1]!),
        await mustGet(tl.ledger, ids[2]!),
      ];
      expect(a).toMatchObject({
        state: 'skipped',
        attempt: 1,
        lastError: 'filter does not match',
        result: 'filter does not match',
        failureClass: null,
      });
      expect(b).toMatchObject({
        state: 'skipped',
        attempt: 1,
        lastError: 'source inactive',
        result: 'source inactive',
      });
      expect(c).toMatchObject({ state: 'completed', result: 'synced' });
      expect(a.terminalAt).toBeInstanceOf(Date);
      expect((await history(tl.ledger, ids[0]!)).map((h) => [h.attempt, h.outcome, h.error])).toEqual([
        [1, 'skipped', 'filter does not match'],
      ]);
      expect((await tl.ledger.inspect(ids[1]!))?.attempts.map((h) => [h.outcome, h.error])).toEqual([
        ['skipped', 'source inactive'],
      ]);

      expect(consumer.counters).toMatchObject({ skipped: 2, completed: 1, retried: 0, dead: 0 });
      const [stats] = await tl.ledger.stats(queue);
      expect(stats?.counts).toMatchObject({
        skipped: { count: 2, atLeast: false },
        completed: { count: 1, atLeast: false },
      });
      const text = await metrics.metrics();
      expect(sample(text, 'lanewake_items_skipped_total', `queue="${queue}",type="sync"`)).toBe(2);
      expect(sample(text, 'lanewake_items_completed_total', `queue="${queue}",type="sync"`)).toBe(1);
    },
  );

  test('a skip inside ctx.transaction rolls its writes back; the item ends skipped', async () => {
    const { tl, queue, producer } = await harness.setUp();
    await createStepEffectsTable(tl.ledger);
    await harness.consumer({
      write: async (job: Job, ctx: JobContext) =>
        ctx.transaction(async (trx) => {
          await sql`INSERT INTO step_effects (item_id, step, worker) VALUES (${job.id}, 'write', 'w')`.execute(trx);
          throw new SkipError('stale by the time it was written');
        }),
    });
    const { id } = await producer.enqueue({ queue, type: 'write', payload: {} });
    await waitFor(
      async () => ((await mustGet(tl.ledger, id)).state === 'skipped' ? true : undefined),
      15_000,
      'skipped',
    );
    const rows = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM step_effects`.execute(tl.ledger.db);
    expect(Number(rows.rows[0]?.n)).toBe(0);
    expect(await mustGet(tl.ledger, id)).toMatchObject({
      state: 'skipped',
      lastError: 'stale by the time it was written',
      attempt: 1,
    });
  });

  test('a batch handler skips items one by one', async () => {
    const { tl, queue, producer } = await harness.setUp();
    const consumer = await harness.consumer({
      rows: defineBatchHandler<{ n: number }>({
        batch: { max: 4, maxWaitMs: 200 },
        handle: async (jobs) =>
          Object.fromEntries(
            jobs.map((j) => [
              j.id,
              j.payload.n % 2 === 0 ? { outcome: 'complete' as const } : { outcome: 'skip' as const, reason: 'odd' },
            ]),
          ),
      }),
    });
    const { ids } = {
      ids: (await producer.enqueueMany([0, 1, 2, 3].map((n) => ({ queue, type: 'rows', payload: { n } })))).map(
        (r) => r.id,
      ),
    };
    await waitFor(
      () => consumer.counters.completed + consumer.counters.skipped === 4 || undefined,
      15_000,
      'the batch ended',
    );
    expect(await itemCount(tl.ledger, queue, 'skipped')).toBe(2);
    expect(await mustGet(tl.ledger, ids[1]!)).toMatchObject({ state: 'skipped', lastError: 'odd' });
    expect(await mustGet(tl.ledger, ids[2]!)).toMatchObject({ state: 'completed' });
  });
});

describe('job.coalesced on every run of a coalescing type', () => {
  test('a lone head of `all` and of `latest` sees a group of one', async () => {
    const { queue, producer } = await harness.setUp();
    const seen = new Map<string, unknown>();
    const consumer = await harness.consumer({
      every: defineHandler<{ n: number }>({
        coalesce: 'all',
        handle: async (job) => void seen.set(job.id, job.coalesced),
      }),
      newest: defineHandler<{ n: number }>({
        coalesce: 'latest',
        handle: async (job) => void seen.set(job.id, job.coalesced),
      }),
    });
    const all = await producer.enqueue({ queue, type: 'every', lane: 'a', payload: { n: 1 } });
    const latest = await producer.enqueue({ queue, type: 'newest', lane: 'b', payload: { n: 2 } });
    await waitFor(() => consumer.counters.completed === 2 || undefined, 15_000, 'both ran');
    expect(seen.get(all.id)).toEqual({ ids: [all.id], count: 1, payloads: [{ n: 1 }] });
    expect(seen.get(latest.id)).toEqual({ ids: [latest.id], count: 1 });
  });

  test("a lone `settled` head gets its lane's unsettled payloads first, a skipped item among them", async () => {
    const { tl, queue, producer } = await harness.setUp();
    const seen: { ids: string[]; count: number; payloads: { n: number }[] }[] = [];
    await harness.consumer({
      project: defineHandler<{ n: number; skip?: boolean }>({
        coalesce: 'settled',
        handle: async (job, ctx) => {
          if (job.payload.skip === true) ctx.skip('nothing to project');
          seen.push(job.coalesced);
        },
      }),
    });
    const done = await producer.enqueue({ queue, type: 'project', lane: 'p', payload: { n: 0 } });
    await waitFor(
      async () => ((await mustGet(tl.ledger, done.id)).state === 'completed' ? true : undefined),
      15_000,
      'the first completed',
    );
    const skipped = await producer.enqueue({ queue, type: 'project', lane: 'p', payload: { n: 1, skip: true } });
    await waitFor(
      async () => ((await mustGet(tl.ledger, skipped.id)).state === 'skipped' ? true : undefined),
      15_000,
      'the second skipped',
    );
    const last = await producer.enqueue({ queue, type: 'project', lane: 'p', payload: { n: 2 } });
    await waitFor(
      async () => ((await mustGet(tl.ledger, last.id)).state === 'completed' ? true : undefined),
      15_000,
      'the third completed',
    );
    expect(seen).toEqual([
      { ids: [done.id], count: 1, payloads: [{ n: 0 }] },
      { ids: [last.id], count: 1, payloads: [{ n: 1, skip: true }, { n: 2 }] },
    ]);
  });
});

describe('ctx.stage', () => {
  test(
    'each stage is timed into the histogram per queue, type and ' +
      'stage, reported as an event, and logged with the outcome',
    async () => {
      const { queue, producer } = await harness.setUp();
      const metrics = new LanewakeMetrics({ defaultMetrics: false });
      const log = captureLog('debug');
      const events: [string, string][] = [];
      const consumer = await harness.consumer(
        {
          etl: async (job: Job<{ fail: boolean }>, ctx: JobContext) => {
            const rows = await ctx.stage('fetch', async () => [1, 2, 3]);
            const doubled = await ctx.stage('transform', () => rows.map((r) => r * 2));
            await ctx.stage('write', async () => {
              if (job.payload.fail) throw new Error('write refused');
            });
            return doubled;
          },
          plain: async () => 'no stages',
        },
        { logger: log.logger },
      );
      harness.cleanup(metrics.observeConsumer(consumer));
      consumer.on('stage', (item, stage) => events.push([item.type, stage]));
      await producer.enqueue({ queue, type: 'etl', payload: { fail: false } });
      await producer.enqueue({ queue, type: 'etl', payload: { fail: true }, maxAttempts: 1 });
      await producer.enqueue({ queue, type: 'plain', payload: {} });
      await waitFor(() => consumer.counters.completed + consumer.counters.dead === 3 || undefined, 15_000, 'all ran');

      expect(events.filter(([, s]) => s === 'fetch')).toHaveLength(2);
      expect(events.filter(([, s]) => s === 'write')).toHaveLength(2);
      expect(events.every(([t]) => t === 'etl')).toBe(true);
      const text = await metrics.metrics();
      const count = (stage: string) =>
        sample(text, 'lanewake_stage_duration_seconds_count', `queue="${queue}",type="etl",stage="${stage}"`);
      expect([count('fetch'), count('transform'), count('write')]).toEqual([2, 2, 2]);
      expect(text).not.toMatch(/lanewake_stage_duration_seconds_count\{[^}]*type="plain"/);
      const lines = log.at(20, /stage timings/);
      expect(lines.map((l) => [l.outcome, Object.keys(l.stages as object).sort()])).toEqual(
        expect.arrayContaining([
          ['completed', ['fetch', 'transform', 'write']],
          ['dead', ['fetch', 'transform', 'write']],
        ]),
      );
      expect(lines).toHaveLength(2);
    },
  );
});

describe('Defer() without a time', () => {
  test(
    'releases by the backoff policy, growing with each release ' +
      'since the last spent attempt, and spends no attempt',
    async () => {
      const { tl, queue, producer } = await harness.setUp();
      const attempts: number[] = [];
      // Releases wait 10 ms, 100 ms, 1 s, then 10 s: the last is long enough to see it stored.
      await harness.consumer(
        {
          later: async (job: Job) => {
            attempts.push(job.attempt);
            throw new Defer();
          },
        },
        { backoff: { baseMs: 10, factor: 10, jitter: 0, maxMs: 3_600_000 } },
      );
      const { id } = await producer.enqueue({ queue, type: 'later', payload: {}, maxAttempts: 1 });
      await waitFor(
        async () => ((await history(tl.ledger, id)).length === 4 ? true : undefined),
        15_000,
        'four releases',
      );

      expect(attempts).toEqual([1, 1, 1, 1]);
      const item = await mustGet(tl.ledger, id);
      expect(item).toMatchObject({ state: 'pending', attempt: 0 });
      const releases = await history(tl.ledger, id);
      expect(releases.map((h) => [h.attempt, h.outcome, h.error])).toEqual(
        Array.from({ length: 4 }, () => [1, 'released', 'deferred']),
      );
      // Both on the ledger's clock: the due time the fourth release wrote is 10 ms × 10³ after it.
      const dueInMs = item.runAfter.getTime() - releases[3]!.endedAt.getTime();
      expect(dueInMs).toBeGreaterThan(9_000);
      expect(dueInMs).toBeLessThanOrEqual(10_000);
    },
  );
});
