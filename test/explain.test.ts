import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { explained, liveConsumer as liveConsumerRow } from './support/explain.js';
import { Consumer } from '../src/consumer/consumer.js';
import type { ConsumerRow } from '../src/ledger/sql/fleet/consumers.js';
import type { Explanation } from '../src/ledger/operator-types.js';
import { claimOne, freshQueue } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// "Why isn't this item running?" and the registry of live consumers (docs/design/supervisor.md).

let tl: TestLedger;
const consumers: Consumer[] = [];
beforeAll(async () => {
  tl = await createTestLedger();
});
afterEach(async () => {
  for (const c of consumers.splice(0)) await c.stop({ drainTimeoutMs: 2_000 });
});
afterAll(async () => {
  await tl?.drop();
});

const liveConsumer = (queue: string, opts: Partial<ConsumerRow> = {}): Promise<string> =>
  liveConsumerRow(tl.ledger, 'explain', queue, opts);
const why = (id: string): Promise<Explanation> => explained(tl.ledger, id);

describe('ledger.explain', () => {
  test('reasons from the item: ended, running, lease expired, blocked, not due, behind its lane head', async () => {
    const queue = freshQueue('why');
    await liveConsumer(queue);
    const done = await tl.ledger.enqueue({ queue, type: 't', payload: {} });
    expect(await tl.ledger.complete(await claimOne(tl.ledger, queue))).toMatchObject({ won: true });
    expect(await why(done.id)).toMatchObject({ code: 'terminal', state: 'completed' });

    const run = await tl.ledger.enqueue({ queue, type: 't', payload: {} });
    const held = await claimOne(tl.ledger, queue, 'holder-1');
    expect(await why(run.id)).toMatchObject({ code: 'processing', details: { owner: 'holder-1' } });
    const blocked = await tl.ledger.block(held, {
      dependencyKey: 'repo:7',
      maxWaitMs: 3_600_000,
      probeAfterMs: 60_000,
    });
    expect(blocked).toMatchObject({ won: true, state: 'blocked' });
    expect(await why(run.id)).toMatchObject({ code: 'blocked_on_dependency', details: { dependencyKey: 'repo:7' } });

    const brief = await tl.ledger.enqueue({ queue, type: 't', payload: {} });
    await tl.ledger.claim({ queue, owner: 'gone', limit: 1, leaseMs: 50 });
    await waitFor(
      async () => ((await why(brief.id)).code === 'lease_expired' ? true : undefined),
      5_000,
      'the lease to expire',
    );

    const later = await tl.ledger.enqueue({ queue, type: 't', payload: {}, delayMs: 3_600_000 });
    const e = await why(later.id);
    expect(e).toMatchObject({ code: 'not_due' });
    expect(new Date(String(e.details.runAfter)).getTime()).toBeGreaterThan(e.at.getTime() + 3_500_000);

    const [first, second] = await tl.ledger.enqueueMany(
      [0, 1].map((n) => ({ queue, type: 't', lane: 'l', payload: { n } })),
    );
    expect(await why(first!.id)).toMatchObject({ code: 'claimable' });
    expect(await why(second!.id)).toMatchObject({
      code: 'behind_lane_head',
      details: { headId: first!.id, headState: 'pending' },
    });
    expect(await tl.ledger.explain('no-such-item-000000000')).toBeUndefined();
  });

  test('reasons from the fleet: no live consumer, class or type not served, epoch inactive, queue capped', async () => {
    const queue = freshQueue('whyfleet');
    const item = await tl.ledger.enqueue({ queue, type: 'report', queueClass: 'bulk', payload: {} });
    expect(await why(item.id)).toMatchObject({ code: 'no_live_consumer' });
    await liveConsumer(queue, { classes: ['interactive', 'default'] });
    expect(await why(item.id)).toMatchObject({
      code: 'class_not_served',
      details: { class: 'bulk', served: 'interactive, default' },
    });
    await liveConsumer(queue, { types: ['email', 'sms'] });
    expect(await why(item.id)).toMatchObject({ code: 'type_not_served', details: { type: 'report' } });
    await tl.ledger.activate({ queue, deployment: 'blue' });
    await tl.ledger.activate({ queue, deployment: 'green' });
    await liveConsumer(queue, { types: ['report'], epoch: 1 });
    expect(await why(item.id)).toMatchObject({
      code: 'epoch_not_served',
      details: { epoch: 2, consumerEpochs: '1' },
    });
    const capped = await liveConsumer(queue, { epoch: 2, maxProcessing: 1 });
    const other = await tl.ledger.enqueue({ queue, type: 'report', queueClass: 'bulk', payload: {}, priority: -1 });
    const held = await tl.ledger.claim({ queue, owner: 'w', limit: 1, leaseMs: 60_000, epoch: 2 });
    expect(held.items.map((i) => i.id)).toEqual([other.id]);
    expect(await why(item.id)).toMatchObject({ code: 'queue_capped', details: { processing: 1, maxProcessing: 1 } });
    await tl.ledger.consumerGone(capped);
    await liveConsumer(queue, { epoch: 2 });
    expect(await why(item.id)).toMatchObject({ code: 'claimable', details: { consumers: 1 } });
  });
});

describe('live consumers', () => {
  test('a consumer is live from start to stop, with what it serves', async () => {
    const queue = freshQueue('live');
    const c = new Consumer({
      ledger: tl.ledger,
      queue,
      concurrency: 3,
      classes: ['default'],
      types: ['a'],
      maxProcessing: 9,
      handlers: { a: async () => undefined },
    });
    consumers.push(c);
    await c.start();
    expect(await tl.ledger.liveConsumers(queue)).toMatchObject([
      { name: c.name, queue, classes: ['default'], types: ['a'], concurrency: 3, maxProcessing: 9, epoch: null },
    ]);
    await c.stop();
    expect(await tl.ledger.liveConsumers(queue)).toEqual([]);
  });

  test('an item explained as claimable is claimed by a live consumer within one sweep', async () => {
    const queue = freshQueue('claimable');
    const pollIntervalMs = 300;
    /** Each started item, with how many sweeps the consumer had begun when it started. */
    const started = new Map<string, number>();
    // No wake channel: only the consumer's sweep finds items, so "within one sweep" is what is checked.
    const c: Consumer = new Consumer({
      ledger: tl.ledger,
      queue,
      concurrency: 64,
      pollIntervalMs,
      handlers: { t: async (job) => void started.set(job.id, c.counters.sweeps) },
    });
    consumers.push(c);
    await c.start();
    let claimable = 0;
    for (let i = 0; i < 24; i++) {
      const laned = i % 3 === 0;
      const item = await tl.ledger.enqueue({
        queue,
        type: 't',
        payload: { i },
        ...(laned ? { lane: `l${i % 2}` } : {}),
        ...(i % 4 === 1 ? { delayMs: 200 } : {}),
      });
      const e = await why(item.id);
      if (e.code !== 'claimable') {
        expect(['behind_lane_head', 'not_due', 'processing', 'terminal']).toContain(e.code);
        continue;
      }
      claimable++;
      const sweepsAtExplain = c.counters.sweeps;
      const sweepsAtStart = await waitFor(
        () => started.get(item.id),
        30_000,
        `item ${i}, explained claimable, to start`,
      );
      // Counted in sweeps, not time: the sweep under way when it was explained may have looked before the
      // insert; the next one finds it, and on a loaded machine the claim round it starts may run after
      // one more sweep has begun. Never later: it was claimable, so nothing else had to change first.
      expect(sweepsAtStart - sweepsAtExplain, `item ${i}`).toBeLessThanOrEqual(2);
    }
    expect(claimable).toBeGreaterThan(10);
  });
});
