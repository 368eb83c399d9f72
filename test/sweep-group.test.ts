import { afterEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { createLogger } from '../src/log.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { onEveryStatement } from './support/mysql-statements.js';

const silent = createLogger('test', 'silent');
const QUEUES = 40;
const POLL_MS = 250;

let tl: TestLedger | undefined;
let tw: TestWake | undefined;
let consumers: Consumer[] = [];
afterEach(async () => {
  await Promise.allSettled(consumers.map((c) => c.stop()));
  consumers = [];
  await tw?.drop();
  await tl?.drop();
});

test(
  '40 idle queues in one process are swept with one statement per ' +
    'interval; work nobody announced, and an expired lease, are still found',
  async () => {
    tl = await createTestLedger();
    tw = createTestWake();
    const ledger = tl.ledger;
    const queues = Array.from({ length: QUEUES }, (_, i) => uniqueQueue(`sweep${i}`));
    const ran = new Map<string, string[]>();
    consumers = queues.map(
      (queue) =>
        new Consumer({
          ledger,
          wake: tw!.wake,
          queue,
          pollIntervalMs: POLL_MS,
          leaseMs: 1_000,
          logger: silent,
          handlers: {
            t: async (job: { id: string; queue: string }) =>
              void ran.set(job.queue, [...(ran.get(job.queue) ?? []), job.id]),
          },
        }),
    );
    for (const c of consumers) await c.start();
    // Each consumer's own first sweep, then a shared one: start-up's claims are done.
    await waitFor(
      () => consumers.every((c) => c.counters.sweeps >= 2) || undefined,
      10_000,
      'every first sweep and a shared one',
    );

    // Idle: what every consumer's sweeps send to the ledger over three intervals.
    const statements: string[] = [];
    const stopCounting = onEveryStatement((text) => void statements.push(text));
    const base = consumers.map((c) => c.counters.sweeps);
    const claimsBefore = consumers.reduce((n, c) => n + c.counters.claimRounds, 0);
    try {
      await waitFor(
        () => consumers.every((c, i) => c.counters.sweeps >= base[i]! + 3) || undefined,
        10_000,
        'three shared sweeps',
      );
    } finally {
      stopCounting();
    }
    const ticks = Math.max(...consumers.map((c, i) => c.counters.sweeps - base[i]!));
    // The registry of live consumers has one heartbeat for the whole process, every 5 s: at most one in the window.
    const beats = statements.filter((x) => x.startsWith('INSERT INTO `lw_consumers`'));
    expect(beats.length).toBeLessThanOrEqual(1);
    const sweeps = statements.filter((x) => !beats.includes(x));
    // One signals statement per interval (the window may catch the start of one more); before, each
    // queue's sweep was a claim and a maintenance pass: 3 statements x 40 queues per interval.
    expect(sweeps.length, sweeps.map((x) => x.slice(0, 60)).join('\n')).toBeLessThanOrEqual(ticks + 1);
    expect(consumers.reduce((n, c) => n + c.counters.claimRounds, 0)).toBe(claimsBefore);

    // An item whose wake-up was never published is found by the next shared sweep, by its own queue's consumer.
    const quiet = queues[17]!;
    const { id } = await ledger.enqueue({ queue: quiet, type: 't', payload: {} });
    await waitFor(() => ran.get(quiet)?.includes(id) || undefined, 10_000, 'the unannounced item to run');

    // A lease that ran out (its holder died) is reclaimed by the shared sweep's maintenance and run.
    const orphaned = queues[5]!;
    const { id: held } = await ledger.enqueue({ queue: orphaned, type: 't', payload: {} });
    const claimed = await ledger.claim({ queue: orphaned, owner: 'dead-process', limit: 1, leaseMs: 200 });
    expect(claimed.items.map((i) => i.id)).toEqual([held]);
    await waitFor(() => ran.get(orphaned)?.includes(held) || undefined, 10_000, 'the reclaimed item to run');
    expect([...ran.keys()].sort()).toEqual([quiet, orphaned].sort());
  },
);
