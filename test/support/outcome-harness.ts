// The engine-outcomes suites' harness (test/engine-outcomes-*.test.ts): one consumer and its items' outcomes.
import { afterEach } from 'vitest';
import { Consumer } from '../../src/consumer/consumer.js';
import type { Outcome } from '../../src/consumer/job-run.js';
import type { HandlerEntry } from '../../src/consumer/types.js';
import type { LedgerConfigInput } from '../../src/ledger/config.js';
import type { EnqueueInput, Ledger } from '../../src/ledger/ledger.js';
import type { WorkItem } from '../../src/ledger/types.js';
import { Producer } from '../../src/producer/producer.js';
import type { ConsumerTuning } from './consumer-harness.js';
import { createTestWake, uniqueQueue, type TestWake } from './engine.js';
import { createTestLedger, waitFor, type TestLedger } from './ledger.js';

export interface OutcomeHarness {
  ledger: Ledger;
  consumer: Consumer;
  producer: Producer;
  queue: string;
  /** Outcomes per item id, in the order the consumer wrote them. */
  outcomes: Map<string, Outcome[]>;
  enqueue: (input: Omit<EnqueueInput, 'queue'>) => Promise<string>;
  /** Waits until `id` has had `outcome`; resolves with all its outcomes so far. */
  waitOutcome: (id: string, outcome: Outcome, timeoutMs?: number) => Promise<Outcome[]>;
  item: (id: string) => Promise<WorkItem>;
}

/**
 * Call once at a test file's top level. `harness()` makes a ledger and wake channel of the test's own, one
 * started consumer on a fresh queue, and a producer; after each test the steps pushed onto `cleanups` run
 * (last first), then the channel's keys and the ledger's database go.
 */
export function outcomeHarness(): {
  harness: (
    handlers: Record<string, HandlerEntry>,
    tuning?: ConsumerTuning,
    ledgerConfig?: Partial<LedgerConfigInput>,
  ) => Promise<OutcomeHarness>;
  cleanups: (() => Promise<unknown> | void)[];
} {
  let tl: TestLedger | undefined;
  let tw: TestWake | undefined;
  const cleanups: (() => Promise<unknown> | void)[] = [];

  afterEach(async () => {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
    cleanups.length = 0;
    await tw?.drop();
    await tl?.drop();
    tw = undefined;
    tl = undefined;
  });

  async function harness(
    handlers: Record<string, HandlerEntry>,
    tuning: ConsumerTuning = {},
    ledgerConfig: Partial<LedgerConfigInput> = {},
  ): Promise<OutcomeHarness> {
    tl = await createTestLedger(ledgerConfig);
    tw = createTestWake();
    const ledger = tl.ledger;
    const queue = uniqueQueue('outcome');
    const consumer = new Consumer({
      ledger,
      wake: tw.wake,
      queue,
      concurrency: 4,
      pollIntervalMs: 1000,
      ...tuning,
      handlers,
    });
    const outcomes = new Map<string, Outcome[]>();
    consumer.on('outcome', (item, outcome) => outcomes.set(item.id, [...(outcomes.get(item.id) ?? []), outcome]));
    cleanups.push(() => consumer.stop({ drainTimeoutMs: 1000 }));
    await consumer.start();
    const producer = new Producer({ ledger, wake: tw.wake });
    return {
      ledger,
      consumer,
      producer,
      queue,
      outcomes,
      enqueue: async (input) => (await producer.enqueue({ ...input, queue })).id,
      waitOutcome: (id, outcome, timeoutMs = 15_000) =>
        waitFor(
          () => (outcomes.get(id)?.includes(outcome) ? outcomes.get(id) : undefined),
          timeoutMs,
          `${id}: ${outcome}`,
        ),
      item: async (id) => {
        const item = await ledger.get(id);
        if (!item) throw new Error(`no item ${id}`);
        return item;
      },
    };
  }

  return { harness, cleanups };
}

export async function attemptsOf(ledger: Ledger, id: string) {
  const r = await ledger.inspect(id);
  if (!r) throw new Error(`no item ${id}`);
  return r.attempts;
}

/** Resolves when `signal` aborts, with the abort reason's message. */
export function aborted(signal: AbortSignal): Promise<string> {
  return new Promise((resolve) => {
    const done = () => resolve(String((signal.reason as Error | undefined)?.message ?? signal.reason));
    if (signal.aborted) done();
    else signal.addEventListener('abort', done, { once: true });
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
