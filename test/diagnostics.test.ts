import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import {
  DIAGNOSTICS,
  type ClaimRoundMessage,
  type ReconcilePassMessage,
  type WakeReadMessage,
} from '../src/diagnostics.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { Reconciler } from '../src/supervisor/reconciler.js';
import { uniqueQueue } from './support/engine.js';
import { claimOne } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { testScope } from './support/scope.js';

// The diagnostics channels (src/diagnostics.ts): what a tool in the process sees of reconciler passes,
// claim rounds and wake reads, without holding the supervisor or the consumers.

const scope = testScope();
const silent = createLogger('test', 'silent');

/** Every message on `name` while the test runs. */
function listen<T>(name: string): T[] {
  const seen: T[] = [];
  const onMessage = (m: unknown): void => void seen.push(m as T);
  subscribe(name, onMessage);
  scope.cleanup(async () => unsubscribe(name, onMessage));
  return seen;
}

test('a reconciler pass that reclaims an expired lease says when it was due, looked, reclaimed and ended', async () => {
  const tl = await scope.ledger();
  const queue = uniqueQueue('diag-pass');
  const passes = listen<ReconcilePassMessage>(DIAGNOSTICS.reconcilePass);
  await tl.ledger.enqueue({ queue, type: 't', payload: {} });
  const held = await claimOne(tl.ledger, queue, 'gone', 200);
  await waitFor(
    async () => (await tl.ledger.now()).getTime() > held.leaseUntil.getTime() || undefined,
    5_000,
    'the lease to run out',
  );
  const reconciler = new Reconciler({
    ledger: tl.ledger,
    queues: [queue],
    intervalMs: 50,
    retentionMs: 0,
    log: silent,
  });
  scope.cleanup(() => reconciler.stop());
  const startedAt = Date.now();
  reconciler.start();
  const pass = await waitFor(
    () => passes.find((p) => p.queues.some((q) => q.reclaimed.includes(held.id))),
    10_000,
    'the pass that reclaims it',
  );
  const q = pass.queues.find((x) => x.queue === queue)!;
  expect(pass.intervalMs).toBe(50);
  expect(pass.dueAtMs).toBeGreaterThanOrEqual(startedAt);
  expect(pass.startedAtMs).toBeGreaterThanOrEqual(pass.dueAtMs);
  expect(pass.lookedAtMs).toBeGreaterThanOrEqual(pass.startedAtMs);
  expect(q.reclaimStartedAtMs).toBeGreaterThanOrEqual(pass.lookedAtMs);
  expect(q.reclaimedAtMs).toBeGreaterThanOrEqual(q.reclaimStartedAtMs!);
  expect(pass.endedAtMs).toBeGreaterThanOrEqual(q.reclaimedAtMs!);
  expect(q.ended).toEqual([]);
  expect(pass.failed).toEqual([]);
  // A later pass of the same reconciler found nothing to reclaim: it did not look.
  await waitFor(() => passes.length >= 2 || undefined, 5_000, 'a second pass');
  expect(passes[1]!.queues.find((x) => x.queue === queue)).toMatchObject({
    reclaimed: [],
    reclaimStartedAtMs: undefined,
    reclaimedAtMs: undefined,
  });
});

test("a consumer's wake reads and claim rounds name the items and the consumer", async () => {
  const tl = await scope.ledger();
  const tw = scope.wake();
  const queue = uniqueQueue('diag-claim');
  const reads = listen<WakeReadMessage>(DIAGNOSTICS.wakeRead);
  const rounds = listen<ClaimRoundMessage>(DIAGNOSTICS.claimRound);
  const ran: string[] = [];
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    logger: silent,
    handlers: { t: async (job: { id: string }) => void ran.push(job.id) },
  });
  await consumer.start();
  scope.cleanup(() => consumer.stop());
  // A producer with a channel of its own, as in another process: its wake-up crosses Redis.
  const { id } = await new Producer({ ledger: tl.ledger, wake: tw.remote() }).enqueue({
    queue,
    type: 't',
    payload: {},
  });
  await waitFor(() => ran.includes(id) || undefined, 10_000, 'the item to run');
  const read = reads.find((r) => r.queue === queue && r.ids.includes(id));
  const round = rounds.find((r) => r.queue === queue && r.claimed.includes(id));
  // A cold consumer makes no offer: the item crosses the stream and a claim round takes it (by its id, or by a
  // look for heads that the start-up sweep asked for and that ran first).
  expect(read).toMatchObject({ consumer: consumer.name, entries: 1 });
  expect(round).toMatchObject({ consumer: consumer.name });
  expect(round!.endedAtMs).toBeGreaterThanOrEqual(round!.startedAtMs);
  expect(rounds.every((r) => r.consumer === consumer.name && r.queue === queue)).toBe(true);
});
