import { describe, expect, test } from 'vitest';
import type { Consumer } from '../src/consumer/consumer.js';
import type { Outcome } from '../src/consumer/job-run.js';
import type { HandlerEntry } from '../src/consumer/types.js';
import { consumerHarness, type ConsumerSetup } from './support/consumer-harness.js';
import { mustGet } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { ChildConsumer } from './support/processes.js';
import { redisUrl } from './support/services.js';
import { createStepEffectsTable, stepEffects, threeStepHandler } from './support/step-effects.js';

// Durable steps through a consumer (docs/design/batches-and-steps.md, "Durable steps").

const harness = consumerHarness('steps');

async function setUp(): Promise<ConsumerSetup> {
  const setup = await harness.setUp();
  await createStepEffectsTable(setup.tl.ledger);
  return setup;
}

async function startConsumer(
  _queue: string,
  handlers: Record<string, HandlerEntry>,
  outcomes?: Map<string, Outcome[]>,
): Promise<Consumer> {
  // Retries come back after 50 ms, so a test of several attempts stays short.
  const consumer = await harness.consumer(handlers, {
    name: 'local',
    concurrency: 2,
    leaseMs: 2000,
    backoff: { baseMs: 50, factor: 1 },
  });
  consumer.on('outcome', (item, outcome) => outcomes?.set(item.id, [...(outcomes.get(item.id) ?? []), outcome]));
  return consumer;
}

describe('durable steps', () => {
  test(
    'a handler of three steps SIGKILLed in step three: the next ' +
      'attempt runs only step three, and steps one and two ran once',
    async () => {
      const { tl, tw, queue, producer } = await setUp();
      const { id } = await producer.enqueue({ queue, type: 'step', payload: {} });
      const child = new ChildConsumer({
        dbUrl: tl.url,
        redisUrl: redisUrl(),
        keyPrefix: tw.keyPrefix,
        queue,
        name: 'child',
        mode: 'steps-hang',
        leaseMs: 2000,
        pollIntervalMs: 200,
      });
      harness.cleanup(() => child.kill());
      await child.waitReady();
      await waitFor(
        async () => (await tl.ledger.steps(id)).some((s) => s.name === 'two') || undefined,
        30_000,
        'step two recorded by the child',
      );
      await child.kill();

      // Another consumer reclaims the dead holder's lease and resumes the item.
      const local = await startConsumer(queue, {
        step: threeStepHandler(tl.ledger.db, 'local', { hangAtThree: false }),
      });
      const done = await waitFor(
        async () => {
          const item = await mustGet(tl.ledger, id);
          return item.state === 'completed' ? item : undefined;
        },
        30_000,
        'resumed item completed',
      );

      expect(done).toMatchObject({ attempt: 2, result: 3 });
      expect(await stepEffects(tl.ledger, id)).toEqual(['one@child', 'two@child', 'three@local']);
      expect((await tl.ledger.steps(id)).map((s) => [s.name, s.attempt])).toEqual([
        ['one', 1],
        ['two', 1],
        ['three', 2],
      ]);
      expect(local.counters).toMatchObject({ stepsResumed: 2, stepsRecorded: 1 });
    },
  );

  test('steps survive a retry; a throwing step records nothing and runs again on the next attempt', async () => {
    const { tl, queue, producer } = await setUp();
    const calls: string[] = [];
    const outcomes = new Map<string, Outcome[]>();
    const consumer = await startConsumer(
      queue,
      {
        flaky: async (job, ctx) => {
          const a = await ctx.step('a', async () => {
            calls.push(`a${job.attempt}`);
            return { n: 1 };
          });
          const b = await ctx.step('b', async () => {
            calls.push(`b${job.attempt}`);
            if (job.attempt === 1) throw new Error('b fails once');
            return a.n + 1;
          });
          if (job.attempt === 2) throw new Error('fails after the steps');
          return b;
        },
      },
      outcomes,
    );
    const { id } = await producer.enqueue({ queue, type: 'flaky', payload: {}, maxAttempts: 5 });
    // The consumer hears its completion's answer after the ledger committed it: wait for both.
    const done = await waitFor(
      async () => {
        const item = await mustGet(tl.ledger, id);
        return item.state === 'completed' && outcomes.get(id)?.length === 3 ? item : undefined;
      },
      20_000,
      'completed, and its outcome heard',
    );
    // a ran once; b threw on attempt 1 (nothing recorded) and ran again on attempt 2; attempt 3 ran neither.
    expect(calls).toEqual(['a1', 'b1', 'b2']);
    expect(done).toMatchObject({ attempt: 3, result: 2 });
    expect(outcomes.get(id)).toEqual(['retried', 'retried', 'completed']);
    expect((await tl.ledger.steps(id)).map((s) => [s.name, s.attempt, s.result])).toEqual([
      ['a', 1, { n: 1 }],
      ['b', 2, 2],
    ]);
    expect(consumer.counters).toMatchObject({ stepsRecorded: 2, stepsResumed: 3 });
  });

  test(
    'a step name used twice in one run gives the first result; a bad ' +
      'name fails the attempt with a ValidationError naming it',
    async () => {
      const { tl, queue, producer } = await setUp();
      let runs = 0;
      await startConsumer(queue, {
        twice: async (_job, ctx) => {
          const [x, y] = await Promise.all([
            ctx.step('same', async () => ++runs),
            ctx.step('same', async () => ++runs),
          ]);
          const z = await ctx.step('same', async () => ++runs);
          return [x, y, z];
        },
        badName: async (_job, ctx) => ctx.step('', async () => 1),
      });
      const twice = await producer.enqueue({ queue, type: 'twice', payload: {} });
      const bad = await producer.enqueue({ queue, type: 'badName', payload: {}, maxAttempts: 1 });
      const [a, b] = await waitFor(
        async () => {
          const items = await Promise.all([mustGet(tl.ledger, twice.id), mustGet(tl.ledger, bad.id)]);
          return items.every((i) => i.terminalAt !== null) ? items : undefined;
        },
        20_000,
        'both ended',
      );
      expect(a).toMatchObject({ state: 'completed', result: [1, 1, 1] });
      expect(runs).toBe(1);
      expect(b?.state).toBe('dead');
      expect(b?.lastError).toContain('ctx.step: invalid name');
    },
  );
});
