import { createLogger } from '../../src/log.js';
import { resolveWorkerConfig } from '../../src/supervisor/config-sources.js';
import type { HandlersByQueue } from '../../src/supervisor/handlers-module.js';
import { Supervisor, type SupervisorOptions } from '../../src/supervisor/supervisor.js';
import { createTestWake, type TestWake } from './engine.js';
import { createTestLedger, type TestLedger } from './ledger.js';
import { redisUrl } from './services.js';

/** What a test's in-process workers run on: its own ledger and wake prefix, dropped by `cleanups`. */
export async function workerFixtures(cleanups: (() => Promise<unknown>)[]): Promise<{ tl: TestLedger; tw: TestWake }> {
  const tl = await createTestLedger();
  const tw = createTestWake();
  cleanups.push(
    () => tl.drop(),
    () => tw.drop(),
  );
  return { tl, tw };
}

/**
 * A worker as `lanewake worker` runs one, in this process (inline handlers, no admin server, 2 s drain), serving
 * `queues`; stopped by `cleanups`.
 */
export function inlineWorker(
  fixtures: { tl: TestLedger; tw: TestWake },
  cleanups: (() => Promise<unknown>)[],
  spec: {
    queues: Record<string, unknown>[];
    handlers: HandlersByQueue;
    reconcileIntervalMs: number;
    options?: Partial<Pick<SupervisorOptions, 'onConsumer' | 'onQueueGone'>>;
  },
): Supervisor {
  const config = resolveWorkerConfig([
    {
      databaseUrl: fixtures.tl.url,
      redisUrl: redisUrl(),
      redisKeyPrefix: fixtures.tw.keyPrefix,
      handlers: 'inline',
      admin: false,
      reconcileIntervalMs: spec.reconcileIntervalMs,
      drainTimeoutMs: 2_000,
      poolSize: 4,
      queues: spec.queues,
    },
  ]);
  const sup = new Supervisor({
    config,
    handlers: spec.handlers,
    logger: createLogger('test', 'silent'),
    ...spec.options,
  });
  cleanups.push(() => sup.stop());
  return sup;
}
