import { afterEach, describe, expect, test } from 'vitest';
import { ValidationError } from '../src/errors.js';
import { Producer } from '../src/producer/producer.js';
import { RestartBackoff } from '../src/supervisor/backoff.js';
import { configFromEnv, resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import type { WorkerConfig } from '../src/supervisor/config.js';
import { QueueRunner } from '../src/supervisor/queue-runner.js';
import { EXIT_OWNERSHIP_LOST, Supervisor } from '../src/supervisor/supervisor.js';
import { createLogger } from '../src/log.js';
import { uniqueQueue, type TestWake } from './support/engine.js';
import { workerFixtures } from './support/inline-worker.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { redisUrl } from './support/services.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

const fixtures = () => workerFixtures(cleanups);

function config(
  tl: TestLedger,
  tw: TestWake,
  queues: WorkerConfig['queues'] | unknown[],
  extra: Record<string, unknown> = {},
): WorkerConfig {
  return resolveWorkerConfig([
    {
      databaseUrl: tl.url,
      redisUrl: redisUrl(),
      redisKeyPrefix: tw.keyPrefix,
      handlers: 'inline',
      admin: false,
      reconcileIntervalMs: 200,
      ownershipCheckMs: 300,
      drainTimeoutMs: 5_000,
      ...extra,
      queues,
    },
  ]);
}

describe('worker config', () => {
  test('each bad value is rejected naming its field', () => {
    const base = { databaseUrl: 'mysql://root@127.0.0.1/x', handlers: './h.js', queues: [{ name: 'q' }] };
    const fields = (layer: Record<string, unknown>): string[] => {
      try {
        resolveWorkerConfig([{ ...base, ...layer }]);
      } catch (e) {
        expect(e).toBeInstanceOf(ValidationError);
        return [...(e as ValidationError).fields];
      }
      throw new Error('expected a ValidationError');
    };
    expect(fields({ queues: [{ name: 'q', concurrency: 0 }] })).toEqual(['queues[0].concurrency']);
    expect(fields({ queues: [{ name: 'Bad Queue' }] })).toEqual(['queues[0].name']);
    expect(fields({ queues: [{ name: 'q', prefetch: -1 }] })).toEqual(['queues[0].prefetch']);
    expect(fields({ queues: [] })).toEqual(['queues']);
    expect(fields({ queues: [{ name: 'q', ownership: true }] })).toEqual(['deployment']);
    expect(fields({ admin: { port: 70_000 } })).toEqual(['admin.port']);
    expect(fields({ drainTimeoutMs: -1 })).toEqual(['drainTimeoutMs']);
    expect(fields({ pollSize: 3 })).toEqual(['pollSize']);
    expect(fields({ queues: [{ name: 'q' }, { name: 'q' }] })).toEqual(['queues[1].name']);
  });

  test('env LANEWAKE_* fills fields and flags win over env over file', () => {
    const env = configFromEnv({
      LANEWAKE_DATABASE_URL: 'mysql://root@h/db',
      LANEWAKE_QUEUES: 'billing:16,mail',
      LANEWAKE_ADMIN: '0.0.0.0:9999',
      LANEWAKE_POOL_SIZE: '7',
    });
    const c = resolveWorkerConfig([{ handlers: './file.js', poolSize: 3 }, env, { poolSize: 12 }]);
    expect(c.databaseUrl).toBe('mysql://root@h/db');
    // `mail` sets no slots: the queue's in the ledger apply, else the default (src/supervisor/live-settings.ts).
    expect(c.queues.map((q) => [q.name, q.concurrency])).toEqual([
      ['billing', 16],
      ['mail', undefined],
    ]);
    expect(c.admin).toEqual({ host: '0.0.0.0', port: 9999 });
    expect(c.poolSize).toBe(12);
    expect(() =>
      resolveWorkerConfig([
        { handlers: 'x', ...configFromEnv({ LANEWAKE_DATABASE_URL: 'u', LANEWAKE_QUEUES: 'q:many' }) },
      ]),
    ).toThrow(/queues\[0\]\.concurrency/);
  });
});

describe('restart backoff', () => {
  test('1 s doubling to 30 s, reset after a healthy run', () => {
    const b = new RestartBackoff();
    expect([0, 0, 0, 0, 0, 0, 0].map(() => b.delayAfter(10))).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    expect(b.delayAfter(120_000)).toBe(1000);
    expect(b.delayAfter(5)).toBe(2000);
  });

  test('a consumer that cannot start is restarted in place with backoff until it can', async () => {
    const tl = await createTestLedger({}, false); // schema missing: Consumer.start() refuses
    cleanups.push(() => tl.drop());
    const queue = uniqueQueue('restart');
    const runner = new QueueRunner({
      queue: { name: queue, concurrency: 2, ownership: false },
      ledger: tl.ledger,
      wake: undefined,
      handlers: { t: async () => 'ok' },
      log: createLogger('test', 'silent'),
      drainTimeoutMs: 1000,
      epoch: () => undefined,
      backoff: new RestartBackoff(20, 200, 60_000),
    });
    runner.start();
    cleanups.push(() => runner.stop());
    await waitFor(() => (runner.restarts >= 3 ? true : undefined), 10_000, 'three restarts');
    expect(runner.state).not.toBe('running');
    await tl.ledger.migrate();
    await waitFor(
      () => (runner.state === 'running' ? true : undefined),
      10_000,
      'the runner to come up once the schema exists',
    );
    const { id } = await tl.ledger.enqueue({ queue, type: 't', payload: {} });
    runner.current?.kick();
    await waitFor(
      async () => ((await tl.ledger.get(id))?.state === 'completed' ? true : undefined),
      10_000,
      'the item to complete',
    );
  });
});

describe('supervisor', () => {
  test('runs a consumer per queue and drains on stop, leaving nothing processing', async () => {
    const { tl, tw } = await fixtures();
    const [qa, qb] = [uniqueQueue('sa'), uniqueQueue('sb')];
    let release: () => void = () => undefined;
    const gate = new Promise<void>((r) => (release = r));
    let slowStarted = false;
    const sup = new Supervisor({
      config: config(tl, tw, [
        { name: qa, concurrency: 4 },
        { name: qb, concurrency: 2 },
      ]),
      handlers: {
        [qa]: { fast: async () => 'a' },
        [qb]: {
          slow: async () => {
            slowStarted = true;
            return gate;
          },
        },
      },
      logger: createLogger('test', 'silent'),
    });
    await sup.start();
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    await producer.enqueueMany(Array.from({ length: 20 }, (_, i) => ({ queue: qa, type: 'fast', payload: { i } })));
    const slow = await producer.enqueue({ queue: qb, type: 'slow', payload: {} });
    await waitFor(
      async () => ((await tl.ledger.stats(qa))[0]?.counts.completed.count === 20 ? true : undefined),
      15_000,
      'queue a drained',
    );
    // The handler itself must be running: 'processing' in the ledger is also
    // true of an item whose claim has committed but not yet reached the
    // consumer, and a stop rightly releases such an item instead of draining it.
    await waitFor(() => (slowStarted ? true : undefined), 15_000, 'slow handler running');
    expect((await tl.ledger.get(slow.id))?.state).toBe('processing');
    const stopped = sup.stop();
    setTimeout(release, 200).unref();
    await stopped;
    expect(await sup.done).toBe(0);
    expect((await tl.ledger.get(slow.id))?.state).toBe('completed');
    const all = await tl.ledger.stats();
    expect(all.reduce((n, s) => n + s.counts.processing.count, 0)).toBe(0);
  });

  test(
    'a queue with pools runs a consumer per pool, live in the registry with ' +
      'its classes; pools that cannot be are refused before anything starts',
    async () => {
      const { tl, tw } = await fixtures();
      const queue = uniqueQueue('pooled');
      expect(
        () =>
          new Supervisor({
            config: config(tl, tw, [{ name: queue, concurrency: 1, pools: 'auto' }]),
            handlers: { [queue]: { t: async () => undefined } },
          }),
      ).toThrow(expect.objectContaining({ fields: ['queues.0.pools'] }));
      const sup = new Supervisor({
        config: config(tl, tw, [{ name: queue, concurrency: 8, pools: 'auto' }]),
        handlers: { [queue]: { t: async () => undefined } },
        logger: createLogger('test', 'silent'),
      });
      cleanups.push(() => sup.stop());
      await sup.start();
      await waitFor(
        () => [...sup.runners.get(queue)!].every((r) => r.state === 'running') || undefined,
        10_000,
        'every pool running',
      );
      const live = await tl.ledger.liveConsumers(queue);
      expect(live.map((c) => [c.classes, c.concurrency]).sort()).toEqual(
        [
          [['interactive', 'default'], 2],
          [['bulk'], 2],
          [['interactive', 'default', 'bulk'], 4],
        ].sort(),
      );
      await sup.stop();
      expect(await tl.ledger.liveConsumers(queue)).toEqual([]);
    },
  );

  test(
    'ownership: activating a new deployment stops the old one (exit ' +
      '3), the new one takes over, and the old epoch cannot claim',
    async () => {
      const { tl, tw } = await fixtures();
      const queue = uniqueQueue('own');
      const seenBy: Record<string, string[]> = { blue: [], green: [] };
      const make = (deployment: 'blue' | 'green') =>
        new Supervisor({
          config: config(tl, tw, [{ name: queue, concurrency: 2, ownership: true }], { deployment }),
          handlers: { [queue]: { job: async (j: { id: string }) => void seenBy[deployment]!.push(j.id) } },
          logger: createLogger('test', 'silent'),
        });
      await tl.ledger.activate({ queue, deployment: 'blue', expectEpoch: 0 });
      const blue = make('blue');
      const green = make('green');
      cleanups.push(
        () => blue.stop(),
        () => green.stop(),
      );
      await blue.start();
      await green.start();
      expect((await blue.readiness()).ready).toBe(true);
      expect((await green.readiness()).ready).toBe(false);

      const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
      const first = await producer.enqueue({ queue, type: 'job', payload: {} });
      await waitFor(() => (seenBy.blue!.includes(first.id) ? true : undefined), 10_000, 'blue to run the first item');

      const next = await tl.ledger.activate({ queue, deployment: 'green', expectEpoch: 1 });
      await tw.wake.publishControl(queue, { type: 'ownership', epoch: next.epoch, deployment: 'green' });
      expect(await blue.done).toBe(EXIT_OWNERSHIP_LOST);
      expect((await blue.readiness()).ready).toBe(false);
      await waitFor(
        async () => ((await green.readiness()).ready ? true : undefined),
        10_000,
        'green to take ownership',
      );

      const second = await producer.enqueue({ queue, type: 'job', payload: {} });
      await waitFor(
        () => (seenBy.green!.includes(second.id) ? true : undefined),
        10_000,
        'green to run the second item',
      );
      expect(seenBy.blue).not.toContain(second.id);

      // The ledger itself refuses a claim under the stale epoch (and allows it under the current one).
      await green.stop();
      const item = await tl.ledger.enqueue({ queue, type: 'job', payload: {} });
      expect(
        await tl.ledger.claimByIds({ queue, owner: 'stale-blue', leaseMs: 1000, epoch: 1, ids: [item.id] }),
      ).toEqual([]);
      expect((await tl.ledger.get(item.id))?.state).toBe('pending');
      const current = await tl.ledger.claimByIds({
        queue,
        owner: 'green-2',
        leaseMs: 1000,
        epoch: next.epoch,
        ids: [item.id],
      });
      expect(current.map((c) => c.id)).toEqual([item.id]);
    },
  );

  test('ownership: a standby worker hears the first activation broadcast after start() resolved, once', async () => {
    const { tl, tw } = await fixtures();
    const queues = [uniqueQueue('own-first'), uniqueQueue('own-first')];
    const ran: string[] = [];
    const worker = new Supervisor({
      // The ownership check a minute off: only the broadcast can make the takeover prompt.
      config: config(
        tl,
        tw,
        queues.map((name) => ({ name, concurrency: 1, ownership: true })),
        { deployment: 'green', ownershipCheckMs: 60_000 },
      ),
      handlers: Object.fromEntries(queues.map((q) => [q, { job: async (j: { id: string }) => void ran.push(j.id) }])),
      logger: createLogger('test', 'silent'),
    });
    cleanups.push(() => worker.stop());
    // The operator's side is connected before the worker starts, so the broadcasts follow start() at once.
    expect(await tw.wake.usable()).toBe(true);
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    await worker.start();
    for (const queue of queues) {
      const { epoch } = await tl.ledger.activate({ queue, deployment: 'green', expectEpoch: 0 });
      expect(await tw.wake.publishControl(queue, { type: 'ownership', epoch, deployment: 'green' })).toBe(true);
    }
    for (const queue of queues) {
      await waitFor(
        () => worker.ownership.get(queue)?.state === 'owner' || undefined,
        5_000,
        `the activation of ${queue} to be heard`,
      );
    }
    expect((await worker.readiness()).ready).toBe(true);
    const items = await producer.enqueueMany(queues.map((queue) => ({ queue, type: 'job', payload: {} })));
    await waitFor(() => items.every((i) => ran.includes(i.id)) || undefined, 10_000, 'an item of each queue to run');
  });
});
