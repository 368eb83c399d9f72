import { afterEach, describe, expect, test } from 'vitest';
import { ValidationError } from '../src/errors.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { configFromEnv, parseQueueList, resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import type { WorkerConfig } from '../src/supervisor/config.js';
import { Supervisor } from '../src/supervisor/supervisor.js';
import { uniqueQueue, type TestWake } from './support/engine.js';
import { workerFixtures } from './support/inline-worker.js';
import { history, mustGet } from './support/items.js';
import { waitFor, type TestLedger } from './support/ledger.js';
import { redisUrl } from './support/services.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

/** The ValidationError resolveWorkerConfig throws for these layers. */
function rejection(layers: Record<string, unknown>[]): ValidationError {
  try {
    resolveWorkerConfig(layers);
  } catch (e) {
    expect(e).toBeInstanceOf(ValidationError);
    return e as ValidationError;
  }
  throw new Error('expected a ValidationError');
}

const base = { databaseUrl: 'mysql://root@127.0.0.1/x', handlers: './h.js' };

describe('flags and env refine the file queues by name', () => {
  const file = {
    ...base,
    deployment: 'blue',
    queues: [
      { name: 'q1', concurrency: 2, ownership: true, leaseMs: 7_000, maxProcessing: 50, classes: ['bulk'] },
      { name: 'q2', concurrency: 3, deadlineMs: 1_000 },
    ],
  };

  test('--queues q1:4 on a file queue with ownership keeps ownership, leaseMs and maxProcessing', () => {
    const c = resolveWorkerConfig([file, {}, { queues: parseQueueList('q1:4') }]);
    expect(c.queues.find((q) => q.name === 'q1')).toEqual({
      name: 'q1',
      concurrency: 4,
      ownership: true,
      leaseMs: 7_000,
      maxProcessing: 50,
      classes: ['bulk'],
    });
  });

  test('LANEWAKE_QUEUES refines the same way, and flags refine what env set', () => {
    const env = configFromEnv({ LANEWAKE_QUEUES: 'q1:5' });
    const viaEnv = resolveWorkerConfig([file, env, {}]);
    expect(viaEnv.queues.find((q) => q.name === 'q1')).toMatchObject({
      concurrency: 5,
      ownership: true,
      leaseMs: 7_000,
      maxProcessing: 50,
    });
    const both = resolveWorkerConfig([file, env, { queues: parseQueueList('q1::interactive+default') }]);
    expect(both.queues.find((q) => q.name === 'q1')).toMatchObject({
      concurrency: 5,
      classes: ['interactive', 'default'],
      ownership: true,
    });
  });

  test(
    'file queues a flag does not name keep running as the file ' +
      'says; a queue named only by a flag starts with defaults',
    () => {
      const c = resolveWorkerConfig([file, {}, { queues: parseQueueList('q1:4,q3') }]);
      expect(c.queues.map((q) => q.name)).toEqual(['q1', 'q2', 'q3']);
      expect(c.queues[1]).toEqual({ name: 'q2', concurrency: 3, deadlineMs: 1_000, ownership: false });
      // No slots set: the queue's in the ledger, else the consumer's default (src/supervisor/live-settings.ts).
      expect(c.queues[2]).toEqual({ name: 'q3', ownership: false });
    },
  );

  test('a bad flag value still names the field of the merged list; a name listed twice in one layer is refused', () => {
    expect(rejection([file, {}, { queues: parseQueueList('q2:0') }]).fields).toEqual(['queues[1].concurrency']);
    expect(rejection([file, {}, { queues: parseQueueList('q1:x') }]).fields).toEqual(['queues[0].concurrency']);
    expect(rejection([file, {}, { queues: parseQueueList('q1::nope') }]).fields).toEqual(['queues[0].classes[0]']);
    expect(rejection([base, {}, { queues: parseQueueList('a,a') }]).fields).toEqual(['queues[1].name']);
  });
});

describe('per-queue unknown-type settings', () => {
  test('types, unknownType, unknownTypeGraceMs and unknownTypeReleaseMs are accepted per queue', () => {
    const c = resolveWorkerConfig([
      {
        ...base,
        queues: [
          {
            name: 'q',
            types: ['mail.send'],
            unknownType: 'release',
            unknownTypeGraceMs: 3_600_000,
            unknownTypeReleaseMs: 2_000,
          },
        ],
      },
    ]);
    expect(c.queues[0]).toMatchObject({
      types: ['mail.send'],
      unknownType: 'release',
      unknownTypeGraceMs: 3_600_000,
      unknownTypeReleaseMs: 2_000,
    });
  });

  test('each bad value names its field', () => {
    const q = (extra: Record<string, unknown>): Record<string, unknown>[] => [
      { ...base, queues: [{ name: 'q', ...extra }] },
    ];
    expect(rejection(q({ unknownType: 'drop' })).fields).toEqual(['queues[0].unknownType']);
    expect(rejection(q({ unknownTypeGraceMs: -1 })).fields).toEqual(['queues[0].unknownTypeGraceMs']);
    expect(rejection(q({ unknownTypeReleaseMs: 1.5 })).fields).toEqual(['queues[0].unknownTypeReleaseMs']);
    expect(rejection(q({ types: ['bad type'] })).fields).toEqual(['queues[0].types[0]']);
  });
});

describe('one name per setting, and messages that say what to set', () => {
  test('the Redis key prefix is redisKeyPrefix in a file and LANEWAKE_REDIS_KEY_PREFIX in env', () => {
    const queues = [{ name: 'q' }];
    expect(resolveWorkerConfig([{ ...base, queues, redisKeyPrefix: 'app:' }]).redisKeyPrefix).toBe('app:');
    expect(
      resolveWorkerConfig([{ ...base, queues }, configFromEnv({ LANEWAKE_REDIS_KEY_PREFIX: 'env:' })]).redisKeyPrefix,
    ).toBe('env:');
    expect(resolveWorkerConfig([{ ...base, queues }]).redisKeyPrefix).toBe('lw:');
  });

  test('an old name in a file or env is refused naming the new one', () => {
    const queues = [{ name: 'q' }];
    const inFile = rejection([{ ...base, queues, keyPrefix: 'app:' }]);
    expect(inFile.fields).toEqual(['keyPrefix']);
    expect(inFile.message).toContain('redisKeyPrefix');
    let fromEnv: unknown;
    try {
      configFromEnv({ LANEWAKE_KEY_PREFIX: 'app:' });
    } catch (e) {
      fromEnv = e;
    }
    expect(fromEnv).toBeInstanceOf(ValidationError);
    expect((fromEnv as ValidationError).fields).toEqual(['LANEWAKE_KEY_PREFIX']);
    expect((fromEnv as ValidationError).message).toContain('LANEWAKE_REDIS_KEY_PREFIX');
  });

  test('a missing handler module, database URL or queue list names the flag, env variable and file field', () => {
    const noHandlers = rejection([{ databaseUrl: base.databaseUrl, queues: [{ name: 'q' }] }]);
    expect(noHandlers.fields).toEqual(['handlers']);
    expect(noHandlers.message).toMatch(/--handlers <module>.*LANEWAKE_HANDLERS.*handlers:/);
    const noDatabase = rejection([{ handlers: base.handlers, queues: [{ name: 'q' }] }]);
    expect(noDatabase.fields).toEqual(['databaseUrl']);
    expect(noDatabase.message).toMatch(/--database-url <url>.*LANEWAKE_DATABASE_URL.*databaseUrl:/);
    const noQueues = rejection([base]);
    expect(noQueues.fields).toEqual(['queues']);
    expect(noQueues.message).toMatch(/--queues <list>.*LANEWAKE_QUEUES.*queues:/);
  });
});

describe('the unknown-type settings reach the consumer', () => {
  const fixtures = () => workerFixtures(cleanups);

  function supervisor(
    tl: TestLedger,
    tw: TestWake | undefined,
    queues: Record<string, unknown>[],
    handlers: Record<string, () => Promise<unknown>>,
  ): Supervisor {
    const redis = tw ? { redisUrl: redisUrl(), redisKeyPrefix: tw.keyPrefix } : {};
    const config: WorkerConfig = resolveWorkerConfig([
      {
        databaseUrl: tl.url,
        ...redis,
        handlers: 'inline',
        admin: false,
        reconcileIntervalMs: 200,
        drainTimeoutMs: 5_000,
        queues,
      },
    ]);
    const sup = new Supervisor({
      config,
      handlers: Object.fromEntries(queues.map((q) => [String(q.name), handlers])),
      logger: createLogger('test', 'silent'),
    });
    cleanups.push(() => sup.stop());
    return sup;
  }

  test(
    'unknownType, unknownTypeReleaseMs and unknownTypeGraceMs ' +
      'decide what becomes of a type this worker has no handler for',
    async () => {
      const { tl, tw } = await fixtures();
      const [released, dead, noGrace] = [uniqueQueue('unk-rel'), uniqueQueue('unk-dead'), uniqueQueue('unk-grace')];
      const sup = supervisor(
        tl,
        tw,
        [
          { name: released, unknownType: 'release', unknownTypeReleaseMs: 600_000 },
          { name: dead, unknownType: 'dead' },
          { name: noGrace, unknownType: 'release', unknownTypeGraceMs: 0 },
        ],
        { known: async () => 'ok' },
      );
      await sup.start();
      const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
      const [r, d, g] = await Promise.all(
        [released, dead, noGrace].map((queue) => producer.enqueue({ queue, type: 'new.type', payload: {} })),
      );
      // Released: pending again, its attempt given back, due after this queue's release delay (the default is 5 s).
      await waitFor(
        async () => ((await history(tl.ledger, r!.id)).length > 0 ? true : undefined),
        15_000,
        'the unknown-type item to be handed back',
      );
      const item = await mustGet(tl.ledger, r!.id);
      expect(item).toMatchObject({ state: 'pending', attempt: 0 });
      expect(item.runAfter.getTime() - Date.now()).toBeGreaterThan(300_000);
      for (const id of [d!.id, g!.id]) {
        await waitFor(
          async () => ((await tl.ledger.get(id))?.state === 'dead' ? true : undefined),
          15_000,
          'the unknown-type item to end dead',
        );
        expect((await mustGet(tl.ledger, id)).failureClass).toBe('unowned');
      }
    },
  );

  // Swept from the ledger only (no wake channel): that claim is the one that filters by type.
  test('types: only the listed types are claimed', async () => {
    const { tl } = await fixtures();
    const queue = uniqueQueue('types');
    const sup = supervisor(tl, undefined, [{ name: queue, concurrency: 2, types: ['known'], pollIntervalMs: 50 }], {
      known: async () => 'ok',
      other: async () => 'ok',
    });
    await sup.start();
    const producer = new Producer({ ledger: tl.ledger });
    const other = await producer.enqueue({ queue, type: 'other', payload: {} });
    const known = await producer.enqueue({ queue, type: 'known', payload: {} });
    await waitFor(
      async () => ((await tl.ledger.get(known.id))?.state === 'completed' ? true : undefined),
      15_000,
      'the listed type to run',
    );
    expect((await mustGet(tl.ledger, other.id)).state).toBe('pending');
  });
});
