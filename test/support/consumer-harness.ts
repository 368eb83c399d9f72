import { afterEach } from 'vitest';
import { Consumer, type ConsumerOptions } from '../../src/consumer/consumer.js';
import type { HandlerEntry } from '../../src/consumer/types.js';
import { Producer } from '../../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './engine.js';
import { createTestLedger, type TestLedger } from './ledger.js';

export interface ConsumerSetup {
  tl: TestLedger;
  tw: TestWake;
  queue: string;
  producer: Producer;
}

export type ConsumerTuning = Omit<ConsumerOptions, 'ledger' | 'wake' | 'handlers' | 'queue'>;

/**
 * A test's own ledger, wake channel and queue, with consumers started on
 * them; after each test everything registered is stopped (last first), and
 * the ledger's database and the channel's keys are dropped.
 */
export function consumerHarness(label: string): {
  setUp: () => Promise<ConsumerSetup>;
  consumer: (handlers: Record<string, HandlerEntry>, tuning?: ConsumerTuning) => Promise<Consumer>;
  cleanup: (fn: () => Promise<unknown> | void) => void;
} {
  let setup: ConsumerSetup | undefined;
  let cleanups: (() => Promise<unknown> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
    cleanups = [];
    await setup?.tw.drop();
    await setup?.tl.drop();
    setup = undefined;
  });
  const setUp = async (): Promise<ConsumerSetup> => {
    if (setup) return setup;
    const tl = await createTestLedger();
    const tw = createTestWake();
    setup = { tl, tw, queue: uniqueQueue(label), producer: new Producer({ ledger: tl.ledger, wake: tw.wake }) };
    return setup;
  };
  return {
    setUp,
    consumer: async (handlers, tuning = {}) => {
      const { tl, tw, queue } = await setUp();
      const consumer = new Consumer({
        ledger: tl.ledger,
        wake: tw.wake,
        queue,
        pollIntervalMs: 200,
        ...tuning,
        handlers,
      });
      cleanups.push(() => consumer.stop({ drainTimeoutMs: 1000 }));
      await consumer.start();
      return consumer;
    },
    cleanup: (fn) => cleanups.push(fn),
  };
}
