import { describe, expect, test } from 'vitest';
import type { Job, JobContext } from '../src/consumer/types.js';
import type { StageTiming } from '../src/ledger/types.js';
import { lanewake } from './support/cli.js';
import { consumerHarness } from './support/consumer-harness.js';
import { history, mustGet } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { onEveryStatement } from './support/mysql-statements.js';

// The stages an attempt timed (ctx.stage) are kept in the item's attempt history (schema 15): each
// attempt's row carries them, a first-try success that timed any gets a row for them, and a run that
// timed none writes what it wrote before (no row for a first-try success, no stages column).

const harness = consumerHarness('stages');
const fastRetry = { backoff: { baseMs: 10, factor: 1, jitter: 0, maxMs: 10 } };

/** A stage whose work waits for the test to open `gate`: its recorded duration must cover that wait. */
async function timed(awaited: Map<string, number>, key: string, gate: Promise<void>): Promise<void> {
  const started = performance.now();
  await gate;
  awaited.set(key, performance.now() - started);
}

function stagesOf(attempts: readonly { stages?: StageTiming[] }[]): string[][] {
  return attempts.map((a) => (a.stages ?? []).map((s) => s.name));
}

describe('stage timings in the attempt history', () => {
  test('each attempt keeps its stages, as long as what they awaited at least; inspect prints them', async () => {
    const { tl, queue, producer } = await harness.setUp();
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const inner = new Map<string, number>();
    const started = new Set<string>();
    await harness.consumer(
      {
        etl: async (job: Job<{ failFirst: boolean }>, ctx: JobContext) => {
          const key = `${job.id}:${job.attempt}`;
          started.add(key);
          await ctx.stage('fetch', () => timed(inner, `${key}:fetch`, gate));
          await ctx.stage('write', async () => {
            await timed(inner, `${key}:write`, Promise.resolve());
            if (job.payload.failFirst && job.attempt === 1) throw new Error('write refused');
          });
          return 'done';
        },
      },
      fastRetry,
    );
    const once = await producer.enqueue({ queue, type: 'etl', payload: { failFirst: false } });
    const twice = await producer.enqueue({ queue, type: 'etl', payload: { failFirst: true }, maxAttempts: 3 });
    // Both first attempts wait in their fetch stage until the test lets them go.
    await waitFor(() => (started.size === 2 ? true : undefined), 15_000, 'both first attempts started');
    open();
    await waitFor(
      async () =>
        (await mustGet(tl.ledger, once.id)).state === 'completed' &&
        (await mustGet(tl.ledger, twice.id)).state === 'completed'
          ? true
          : undefined,
      15_000,
      'both completed',
    );

    const first = await history(tl.ledger, once.id);
    expect(first.map((a) => [a.attempt, a.outcome])).toEqual([[1, 'completed']]);
    const retried = await history(tl.ledger, twice.id);
    expect(retried.map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'retried'],
      [2, 'completed'],
    ]);
    expect(stagesOf(first)).toEqual([['fetch', 'write']]);
    expect(stagesOf(retried)).toEqual([
      ['fetch', 'write'],
      ['fetch', 'write'],
    ]);
    for (const [id, attempts] of [
      [once.id, first],
      [twice.id, retried],
    ] as const) {
      for (const a of attempts) {
        for (const s of a.stages ?? []) {
          const awaited = inner.get(`${id}:${a.attempt}:${s.name}`);
          expect(awaited, `${id} attempt ${a.attempt} ${s.name}`).toBeDefined();
          // Stored to the microsecond: a rounding down of at most half of one.
          expect(s.ms).toBeGreaterThanOrEqual((awaited ?? Number.NaN) - 0.0005);
        }
      }
    }

    const shown = await lanewake(['--database-url', tl.url, 'inspect', twice.id]);
    expect(shown.code).toBe(0);
    expect(shown.out).toMatch(/stage timings:\n {2}attempt 1 \(retried\): fetch [\d.]+ ms, write [\d.]+ ms\n/);
    expect(shown.out).toMatch(/ {2}attempt 2 \(completed\): fetch [\d.]+ ms, write [\d.]+ ms\n/);
  });

  test('no stages: no history row for a first-try success, no stages column on a retry', async () => {
    const { tl, queue, producer } = await harness.setUp();
    const historyWrites: string[] = [];
    const stop = onEveryStatement((text) => {
      if (/^\s*INSERT INTO\s+\S*attempts\b/i.test(text)) historyWrites.push(text);
    });
    harness.cleanup(stop);
    await harness.consumer(
      {
        plain: async (job: Job<{ failFirst: boolean }>) => {
          if (job.payload.failFirst && job.attempt === 1) throw new Error('not yet');
          return 'done';
        },
      },
      fastRetry,
    );
    const once = await producer.enqueue({ queue, type: 'plain', payload: { failFirst: false } });
    const twice = await producer.enqueue({ queue, type: 'plain', payload: { failFirst: true }, maxAttempts: 3 });
    await waitFor(
      async () =>
        (await mustGet(tl.ledger, once.id)).state === 'completed' &&
        (await mustGet(tl.ledger, twice.id)).state === 'completed'
          ? true
          : undefined,
      15_000,
      'both completed',
    );
    stop();

    expect(await history(tl.ledger, once.id)).toEqual([]);
    const retried = await history(tl.ledger, twice.id);
    expect(retried.map((a) => [a.attempt, a.outcome, 'stages' in a])).toEqual([
      [1, 'retried', false],
      [2, 'completed', false],
    ]);
    // The retried item's two rows, and nothing else; neither names the stages column.
    expect(historyWrites).toHaveLength(2);
    expect(historyWrites.filter((s) => /\bstages\b/.test(s))).toEqual([]);
  });
});
