// Ownership fenced where the work commits (docs/design/supervisor.md, Ownership epochs): once a queue is
// activated for another epoch, every write of the old epoch's work is refused with
// OwnershipLostError, nothing of it commits, and the item goes back unspent to the new owner.
import { sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import type { JobContext } from '../src/consumer/types.js';
import { LeaseLostError, OwnershipLostError } from '../src/errors.js';
import type { Ledger } from '../src/ledger/ledger.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { createLogger } from '../src/log.js';
import { resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import { EXIT_OWNERSHIP_LOST, Supervisor } from '../src/supervisor/supervisor.js';
import { createTestWake, uniqueQueue } from './support/engine.js';
import { redisUrl } from './support/services.js';
import { onEveryStatement } from './support/mysql-statements.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

interface FxDB {
  fx: { item_id: string; worker: string };
}

let tl: TestLedger | undefined;
const stops: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
  await tl?.drop();
  tl = undefined;
});

async function setUp(): Promise<{ ledger: Ledger; queue: string }> {
  tl = await createTestLedger();
  await sql`CREATE TABLE fx (item_id VARCHAR(32) NOT NULL, worker VARCHAR(16) NOT NULL, PRIMARY KEY (item_id, worker))
    ENGINE=InnoDB`.execute(tl.ledger.db);
  return { ledger: tl.ledger, queue: uniqueQueue('fence') };
}

async function effects(ledger: Ledger): Promise<{ item_id: string; worker: string }[]> {
  return (
    await sql<{ item_id: string; worker: string }>`SELECT item_id, worker FROM fx ORDER BY worker`.execute(ledger.db)
  ).rows;
}

function insertEffect(id: string, worker: string) {
  return async (trx: Parameters<Parameters<JobContext<FxDB>['transaction']>[0]>[0]) => {
    await trx.insertInto('fx').values({ item_id: id, worker }).execute();
  };
}

/** Claims every pending item of `queue` under `epoch`. */
async function claimUnder(ledger: Ledger, queue: string, epoch: number, owner: string): Promise<ClaimedItem[]> {
  return (await ledger.claim({ queue, owner, limit: 10, leaseMs: 60_000, epoch })).items;
}

test(
  "activating green while blue's handler is inside ctx.transaction: blue's " +
    'commit is refused, green completes the item once, no attempt spent',
  async () => {
    const { ledger, queue } = await setUp();
    await ledger.activate({ queue, deployment: 'blue', expectEpoch: 0 });
    let entered = 0;
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    const blueErrors: unknown[] = [];
    const blue = new Consumer<FxDB>({
      ledger,
      queue,
      name: 'blue',
      epoch: 1,
      concurrency: 1,
      pollIntervalMs: 50,
      logger: createLogger('test', 'silent'),
      handlers: {
        job: async (job, ctx) => {
          try {
            await ctx.transaction(async (trx) => {
              await insertEffect(job.id, 'blue')(trx);
              entered++;
              await gate;
            });
          } catch (error) {
            blueErrors.push(error);
            throw error;
          }
        },
      },
    });
    await blue.start();
    stops.push(() => blue.stop());
    const { id } = await ledger.enqueue({ queue, type: 'job', payload: {} });
    await waitFor(() => entered > 0 || undefined, 10_000, "blue's handler inside ctx.transaction");

    const green = await ledger.activate({ queue, deployment: 'green', expectEpoch: 1 });
    expect(green.epoch).toBe(2);
    const greenConsumer = new Consumer<FxDB>({
      ledger,
      queue,
      name: 'green',
      epoch: green.epoch,
      concurrency: 1,
      pollIntervalMs: 50,
      logger: createLogger('test', 'silent'),
      handlers: { job: (job, ctx) => ctx.transaction(insertEffect(job.id, 'green')) },
    });
    await greenConsumer.start();
    stops.push(() => greenConsumer.stop());
    openGate();

    await waitFor(
      async () => ((await ledger.get(id))?.state === 'completed' ? true : undefined),
      15_000,
      'green to complete the item',
    );
    expect(blueErrors).toHaveLength(1);
    expect(blueErrors[0]).toBeInstanceOf(OwnershipLostError);
    expect(blueErrors[0]).toMatchObject({ itemId: id, queue, epoch: 1, currentEpoch: 2 });
    expect(await effects(ledger)).toEqual([{ item_id: id, worker: 'green' }]);
    const seen = await ledger.inspect(id);
    // Blue's attempt was given back: green's claim is attempt 1, and the history holds blue's release.
    expect(seen?.item).toMatchObject({ state: 'completed', attempt: 1, epoch: 2 });
    expect(seen?.attempts.map((a) => [a.attempt, a.outcome])).toEqual([[1, 'released']]);
    expect(blue.counters).toMatchObject({ completed: 0, released: 1, retried: 0 });
    expect(greenConsumer.counters.completed).toBe(1);
  },
);

describe('every write of a stale epoch is refused, nothing of it committed', () => {
  async function staleItem(): Promise<{ ledger: Ledger; queue: string; item: ClaimedItem; others: ClaimedItem[] }> {
    const { ledger, queue } = await setUp();
    await ledger.activate({ queue, deployment: 'blue', expectEpoch: 0 });
    await ledger.enqueueMany([0, 1, 2].map((n) => ({ queue, type: 'job', payload: { n } })));
    const [item, ...others] = await claimUnder(ledger, queue, 1, 'blue');
    expect(item?.epoch).toBe(1);
    await ledger.activate({ queue, deployment: 'green', expectEpoch: 1 });
    return { ledger, queue, item: item!, others };
  }

  /** The item is as the claim left it: processing under blue's lease, attempt 1, nothing recorded. */
  async function untouched(ledger: Ledger, item: ClaimedItem): Promise<void> {
    const seen = await ledger.inspect(item.id);
    expect(seen?.item).toMatchObject({
      state: 'processing',
      leaseToken: item.leaseToken,
      attempt: 1,
      checkpoint: null,
      progress: null,
      result: null,
    });
    expect(seen?.steps).toEqual([]);
    expect(seen?.attempts).toEqual([]);
  }

  test('completion, alone and batched, and the other ends', async () => {
    const { ledger, item, others } = await staleItem();
    await expect(ledger.complete(item, { ok: true })).rejects.toBeInstanceOf(OwnershipLostError);
    await expect(ledger.retry(item, { error: new Error('x') })).rejects.toBeInstanceOf(OwnershipLostError);
    await expect(ledger.fail(item, { error: 'x' })).rejects.toBeInstanceOf(OwnershipLostError);
    await expect(ledger.block(item, { dependencyKey: 'dep', maxWaitMs: 60_000 })).rejects.toBeInstanceOf(
      OwnershipLostError,
    );
    await untouched(ledger, item);
    // A batch tells each entry apart: both lost to the epoch.
    const batch = await ledger.completeMany(others.map((handle) => ({ handle, result: 1 })));
    expect(batch).toEqual(others.map(() => ({ won: false, state: 'completed', ownershipLost: true })));
    for (const o of others) await untouched(ledger, o);
  });

  test('batched completions of laned and keyed items', async () => {
    const { ledger, queue } = await setUp();
    await ledger.activate({ queue, deployment: 'blue', expectEpoch: 0 });
    await ledger.enqueueMany([
      { queue, type: 'job', payload: {}, lane: 'a' },
      { queue, type: 'job', payload: {}, lane: 'b' },
      { queue, type: 'job', payload: {}, lane: 'a' },
      { queue, type: 'job', payload: {}, concurrencyKey: 'k1' },
      { queue, type: 'job', payload: {}, concurrencyKey: 'k2' },
    ]);
    const held = await claimUnder(ledger, queue, 1, 'blue');
    expect(held).toHaveLength(4);
    await ledger.activate({ queue, deployment: 'green', expectEpoch: 1 });
    const laned = held.filter((h) => h.lane !== null);
    const keyed = held.filter((h) => h.concurrencyKey !== null);
    expect([laned.length, keyed.length]).toEqual([2, 2]);
    for (const part of [laned, keyed]) {
      expect(await ledger.completeMany(part.map((handle) => ({ handle })))).toEqual(
        part.map(() => expect.objectContaining({ won: false, ownershipLost: true })),
      );
      for (const h of part) await untouched(ledger, h);
    }
    // Green takes them over, unspent, and the lanes' next items wait behind their heads.
    for (const h of held) await ledger.release(h);
    const again = await claimUnder(ledger, queue, 2, 'green');
    expect(again.map((h) => [h.id, h.attempt]).sort()).toEqual(held.map((h) => [h.id, 1]).sort());
    const done = await ledger.completeMany(again.map((handle) => ({ handle })));
    expect(done.every((d) => d.won)).toBe(true);
  });

  test('ctx.transaction, steps, progress and checkpoints', async () => {
    const { ledger, item } = await staleItem();
    await expect(ledger.completeWithin(item, insertEffect(item.id, 'blue') as never)).rejects.toBeInstanceOf(
      OwnershipLostError,
    );
    await expect(ledger.recordStep(item, 'one', 1)).rejects.toBeInstanceOf(OwnershipLostError);
    await expect(ledger.recordStepWithin(item, 'two', insertEffect(item.id, 'step') as never)).rejects.toBeInstanceOf(
      OwnershipLostError,
    );
    await expect(ledger.checkpoint(item, { at: 1 })).rejects.toBeInstanceOf(OwnershipLostError);
    await ledger.saveProgress([{ handle: item, progress: 50 }]);
    expect(await effects(ledger)).toEqual([]);
    await untouched(ledger, item);
  });

  test('the holder gives the item back unspent, and the new owner completes it', async () => {
    const { ledger, queue, item } = await staleItem();
    await expect(ledger.release(item, { reason: 'ownership lost' })).resolves.toMatchObject({
      won: true,
      state: 'pending',
    });
    expect(await ledger.get(item.id)).toMatchObject({ state: 'pending', attempt: 0 });
    const [again] = (await claimUnder(ledger, queue, 2, 'green')).filter((c) => c.id === item.id);
    expect(again).toMatchObject({ attempt: 1, epoch: 2 });
    await expect(ledger.checkpoint(again!, { at: 2 })).resolves.toBe(true);
    await expect(ledger.complete(again!, 'done')).resolves.toMatchObject({ won: true, state: 'completed' });
  });

  test('a lease lost under the current epoch is still a plain LeaseLostError', async () => {
    const { ledger, queue } = await setUp();
    await ledger.activate({ queue, deployment: 'blue', expectEpoch: 0 });
    await ledger.enqueue({ queue, type: 'job', payload: {} });
    const [item] = await claimUnder(ledger, queue, 1, 'blue');
    const stale = { ...item!, leaseToken: 'not-the-token' };
    await expect(ledger.complete(stale)).resolves.toMatchObject({ won: false });
    const refused = await ledger.recordStep(stale, 'one', 1).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LeaseLostError);
    expect(refused).not.toBeInstanceOf(OwnershipLostError);
  });
});

test('the statements of a queue without ownership carry no epoch check', async () => {
  const { ledger, queue } = await setUp();
  const fenced = uniqueQueue('fenced');
  await ledger.activate({ queue: fenced, deployment: 'blue', expectEpoch: 0 });
  const seen: string[] = [];
  const stop = onEveryStatement((text) => void seen.push(text));
  try {
    for (const [q, epoch] of [
      [queue, undefined],
      [fenced, 1],
    ] as const) {
      await ledger.enqueueMany(
        [0, 1, 2, 3].map((n) => ({ queue: q, type: 'job', payload: { n }, ...(n === 3 ? { lane: 'L' } : {}) })),
      );
      const items = (
        await ledger.claim({
          queue: q,
          owner: 'w',
          limit: 10,
          leaseMs: 60_000,
          ...(epoch !== undefined ? { epoch } : {}),
        })
      ).items;
      const [a, b, ...rest] = items;
      await ledger.checkpoint(a!, 1);
      await ledger.saveProgress([{ handle: a!, progress: 10 }]);
      await ledger.recordStep(a!, 's', 1);
      await ledger.complete(a!);
      await ledger.retry(b!, { error: 'x' });
      await ledger.completeMany(rest.map((handle) => ({ handle })));
      if (q === queue) {
        // Every statement so far was of the queue without ownership.
        expect(seen.filter((s) => s.includes('ownership'))).toEqual([]);
        seen.length = 0;
      }
    }
    // And the same calls on a fenced queue do check it, each.
    expect(seen.filter((s) => s.includes('ownership')).length).toBeGreaterThanOrEqual(7);
  } finally {
    stop();
  }
});

test('an idle old-epoch worker learns of the activation from the ledger alone, goes not ready, exits 3', async () => {
  const { ledger, queue } = await setUp();
  const tw = createTestWake();
  stops.push(() => tw.drop());
  await ledger.activate({ queue, deployment: 'blue', expectEpoch: 0 });
  const blue = new Supervisor({
    config: resolveWorkerConfig([
      {
        databaseUrl: tl!.url,
        redisUrl: redisUrl(),
        redisKeyPrefix: tw.keyPrefix,
        handlers: 'inline',
        admin: false,
        ownershipCheckMs: 200,
        deployment: 'blue',
        queues: [{ name: queue, ownership: true }],
      },
    ]),
    handlers: { [queue]: { job: async () => undefined } },
    logger: createLogger('test', 'silent'),
  });
  stops.push(() => blue.stop());
  await blue.start();
  expect((await blue.readiness()).ready).toBe(true);
  // No broadcast on the control stream: only the ledger says it.
  await ledger.activate({ queue, deployment: 'green', expectEpoch: 1 });
  expect(await blue.done).toBe(EXIT_OWNERSHIP_LOST);
  expect((await blue.readiness()).ready).toBe(false);
});
