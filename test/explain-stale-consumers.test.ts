import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest';
import { explained, liveConsumer as liveConsumerRow } from './support/explain.js';
import { Consumer } from '../src/consumer/consumer.js';
import type { ConsumerRow } from '../src/ledger/sql/fleet/consumers.js';
import type { Explanation } from '../src/ledger/operator-types.js';
import { lanewake } from './support/cli.js';
import { expireAndReclaim, freshQueue, claimOne } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

// Explain names a consumer's own stale-only mode (docs/design/consumer.md, "Stale-only claims"): each
// heartbeat records why a consumer claims only rescued work, and a pending head no live consumer
// would take is explained by it, not called claimable.

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
  liveConsumerRow(tl.ledger, 'stale', queue, opts);
const why = (id: string): Promise<Explanation> => explained(tl.ledger, id);

describe('explain and stale-only consumers', () => {
  test('only stale-only consumers serve a head: explain names them, their mode; rescued work is claimed', async () => {
    const queue = freshQueue('stalec');
    const saturated = await liveConsumer(queue, { staleOnly: 'pool' });
    const rescued = await tl.ledger.enqueue({ queue, type: 't', payload: {} });
    expect((await claimOne(tl.ledger, queue, 'dead-holder', 300)).id).toBe(rescued.id);
    await expireAndReclaim(tl.ledger, queue, [rescued.id]);
    const fresh = await tl.ledger.enqueue({ queue, type: 't', payload: {} });

    expect(await tl.ledger.liveConsumers(queue)).toMatchObject([{ name: saturated, staleOnly: 'pool' }]);
    expect(await why(fresh.id)).toMatchObject({
      code: 'stale_only',
      message: `consumer ${saturated} claims only stale work: pool saturated`,
      details: { queue, consumers: `${saturated}: pool saturated` },
    });
    expect(await why(rescued.id)).toMatchObject({ code: 'claimable', details: { consumers: 1 } });
    const cli = await lanewake(['--database-url', tl.url, 'inspect', fresh.id, '--why']);
    expect(cli.out).toContain(`stale_only: consumer ${saturated} claims only stale work: pool saturated`);

    // A second consumer claiming as usual serves it; the stale-only one is not counted.
    const slow = await liveConsumer(queue, { staleOnly: 'slow' });
    expect(await why(fresh.id)).toMatchObject({
      code: 'stale_only',
      message: `its consumers claim only stale work: ${saturated}: pool saturated; ${slow}: claims slow`,
    });
    await liveConsumer(queue);
    expect(await why(fresh.id)).toMatchObject({ code: 'claimable', details: { consumers: 1 } });
    // The mode clears with the next beat that no longer reports it.
    await tl.ledger.consumerBeat(
      [
        {
          name: saturated,
          queue,
          classes: ['default'],
          types: null,
          concurrency: 4,
          maxProcessing: null,
          epoch: null,
          version: 'test',
        },
      ],
      false,
    );
    expect(await tl.ledger.liveConsumers(queue)).toContainEqual(
      expect.objectContaining({ name: saturated, staleOnly: null }),
    );
  });

  test("a running consumer's heartbeat carries its mode: its staleOnly option", async () => {
    const queue = freshQueue('stalec');
    const c = new Consumer({ ledger: tl.ledger, queue, staleOnly: true, handlers: { t: async () => undefined } });
    consumers.push(c);
    await c.start();
    const { id } = await tl.ledger.enqueue({ queue, type: 't', payload: {} });
    expect(await tl.ledger.liveConsumers(queue)).toMatchObject([{ name: c.name, staleOnly: 'consumer' }]);
    expect(await why(id)).toMatchObject({
      code: 'stale_only',
      message: `consumer ${c.name} claims only stale work: its staleOnly option`,
    });
  });
});
