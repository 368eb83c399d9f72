import { afterEach, expect, test } from 'vitest';
import { Consumer, type ConsumerOptions } from '../src/consumer/consumer.js';
import type { Outcome } from '../src/consumer/job-run.js';
import { ValidationError } from '../src/errors.js';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { history, mustGet } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// A rolling deploy: items of a new type are enqueued while old workers, which
// have no handler for it, still run. They must wait for a worker that has one,
// for a grace period, not go to the dead letters on their first claim.

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
const consumers: Consumer[] = [];
afterEach(async () => {
  for (const c of consumers.splice(0)) await c.stop({ drainTimeoutMs: 1000 });
  await tw?.drop();
  await tl?.drop();
  tw = undefined;
  tl = undefined;
});

async function start(
  queue: string,
  handlers: ConsumerOptions['handlers'],
  tuning: Partial<ConsumerOptions> = {},
): Promise<{ consumer: Consumer; outcomes: Outcome[] }> {
  const consumer = new Consumer({
    ledger: tl!.ledger,
    wake: tw!.wake,
    queue,
    concurrency: 2,
    pollIntervalMs: 200,
    ...tuning,
    handlers,
  });
  const outcomes: Outcome[] = [];
  consumer.on('outcome', (_item, o) => outcomes.push(o));
  consumers.push(consumer);
  await consumer.start();
  return { consumer, outcomes };
}

test(
  'by default an item of a type this worker has no handler for is ' +
    'released, spending no attempt; a worker with the handler then runs it',
  async () => {
    tl = await createTestLedger();
    tw = createTestWake();
    const queue = uniqueQueue('unknown');
    const old = await start(queue, { old: async () => 'old' }, { unknownTypeReleaseMs: 100 });
    const { id } = await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueue({
      queue,
      type: 'brand.new',
      payload: {},
    });

    await waitFor(
      () => old.outcomes.filter((o) => o === 'released').length >= 2 || undefined,
      10_000,
      'two releases by the old worker',
    );
    expect(old.outcomes.every((o) => o === 'released')).toBe(true);
    const item = await mustGet(tl.ledger, id);
    expect(item.state === 'pending' || item.state === 'processing').toBe(true);
    expect(item.failureClass).not.toBe('unowned');
    expect((await history(tl.ledger, id)).filter((a) => a.outcome !== 'released')).toEqual([]);

    // The new deployment arrives.
    await old.consumer.stop({ drainTimeoutMs: 1000 });
    await start(queue, { 'brand.new': async () => 'new' });
    await waitFor(
      async () => (await mustGet(tl!.ledger, id)).state === 'completed' || undefined,
      10_000,
      'the new worker to complete it',
    );
    expect(await mustGet(tl.ledger, id)).toMatchObject({ state: 'completed', attempt: 1, result: 'new' });
  },
);

test("past unknownTypeGraceMs (from the item's creation) an unowned item ends dead, class unowned", async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('unknown-grace');
  const w = await start(queue, { old: async () => 'old' }, { unknownTypeReleaseMs: 100, unknownTypeGraceMs: 1_000 });
  const { id } = await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueue({
    queue,
    type: 'brand.new',
    payload: {},
  });

  await waitFor(() => w.outcomes.includes('dead') || undefined, 10_000, 'the item to end dead');
  expect(w.outcomes.slice(0, -1).every((o) => o === 'released')).toBe(true);
  expect(w.outcomes.filter((o) => o === 'released').length).toBeGreaterThan(0);
  const item = await mustGet(tl.ledger, id);
  expect(item).toMatchObject({ state: 'dead', failureClass: 'unowned', attempt: 1 });
  expect(item.terminalAt!.getTime() - item.createdAt.getTime()).toBeGreaterThanOrEqual(1_000);
});

test("unknownType: 'dead' ends such an item dead, class unowned, on its first claim", async () => {
  tl = await createTestLedger();
  tw = createTestWake();
  const queue = uniqueQueue('unknown-dead');
  const w = await start(queue, { old: async () => 'old' }, { unknownType: 'dead' });
  const { id } = await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueue({
    queue,
    type: 'brand.new',
    payload: {},
  });
  await waitFor(() => w.outcomes.length > 0 || undefined, 10_000, 'an outcome');
  expect(w.outcomes).toEqual(['dead']);
  expect(await mustGet(tl.ledger, id)).toMatchObject({ state: 'dead', failureClass: 'unowned', attempt: 1 });
});

test('bad unknown-type settings are ValidationErrors naming the field', () => {
  const make = (tuning: Record<string, unknown>) => () =>
    new Consumer({
      ledger: {} as never,
      queue: 'q',
      handlers: { a: async () => undefined },
      ...tuning,
    } as ConsumerOptions);
  for (const [field, value] of [
    ['unknownType', 'ignore'],
    ['unknownTypeReleaseMs', -1],
    ['unknownTypeGraceMs', 1.5],
  ] as const) {
    expect(make({ [field]: value }), field).toThrow(ValidationError);
    try {
      make({ [field]: value })();
    } catch (e) {
      expect((e as ValidationError).issues.map((i) => i.field)).toContain(field);
    }
  }
});
