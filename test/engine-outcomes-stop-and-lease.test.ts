// Outcomes at a graceful stop (within and past the drain), and the lease a long handler keeps on the consumer's clock.
import { expect, test } from 'vitest';
import type { Job, JobContext } from '../src/consumer/types.js';
import { waitFor } from './support/ledger.js';
import { onEveryStatement } from './support/mysql-statements.js';
import { aborted, attemptsOf, outcomeHarness, sleep } from './support/outcome-harness.js';

const { harness, cleanups } = outcomeHarness();

test('graceful stop lets a handler that finishes within the drain complete', async () => {
  let finished = false;
  const h = await harness({
    steady: async () => {
      await sleep(300);
      finished = true;
      return 'drained';
    },
  });
  const started = new Promise<string>((resolve) => h.consumer.once('started', (item) => resolve(item.id)));
  const id = await h.enqueue({ type: 'steady', payload: {} });
  await started;
  const stopping = h.consumer.stop({ drainTimeoutMs: 10_000 });
  expect(finished).toBe(false);
  await stopping;
  expect(finished).toBe(true);
  expect(h.outcomes.get(id)).toEqual(['completed']);
  expect(await h.item(id)).toMatchObject({ state: 'completed', result: 'drained', attempt: 1 });
});

test('graceful stop past the drain aborts a handler; one that settles is released, spending no attempt', async () => {
  let abortReason: string | undefined;
  const h = await harness({
    stubborn: async (_job: Job<unknown>, ctx: JobContext) => {
      abortReason = await aborted(ctx.signal);
      throw ctx.signal.reason;
    },
  });
  const started = new Promise<string>((resolve) => h.consumer.once('started', (item) => resolve(item.id)));
  const id = await h.enqueue({ type: 'stubborn', payload: {} });
  await started;
  await h.consumer.stop({ drainTimeoutMs: 200 });
  expect(abortReason).toMatch(/shutdown/);
  expect(h.outcomes.get(id)).toEqual(['released']);
  const item = await h.item(id);
  expect(item).toMatchObject({ state: 'pending', attempt: 0, leaseUntil: null });
  expect((await attemptsOf(h.ledger, id)).map((a) => [a.outcome, a.error])).toEqual([['released', 'shutdown']]);
});

test(
  'graceful stop never releases a handler that ignores its ' +
    'abort: the item stays processing until its lease expires',
  async () => {
    let letGo: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (letGo = resolve));
    cleanups.push(() => letGo());
    let abortSeen = false;
    const h = await harness(
      {
        deaf: async (_job: Job<unknown>, ctx: JobContext) => {
          ctx.signal.addEventListener('abort', () => (abortSeen = true));
          await gate; // ignores the signal
          return 'too late';
        },
      },
      { leaseMs: 1500, abortGraceMs: 200 },
    );
    const started = new Promise<{ id: string; token: string }>((resolve) =>
      h.consumer.once('started', (item) => resolve({ id: item.id, token: item.leaseToken })),
    );
    const id = await h.enqueue({ type: 'deaf', payload: {} });
    const claim = await started;
    expect(claim.id).toBe(id);
    await h.consumer.stop({ drainTimeoutMs: 200 });
    expect(abortSeen).toBe(true);
    expect(h.outcomes.get(id)).toEqual(['abandoned']);
    expect(h.consumer.counters).toMatchObject({ abandoned: 1, released: 0, completed: 0 });

    // Not released: still processing under the same claim, its lease still running.
    const held = await h.item(id);
    expect(held).toMatchObject({
      state: 'processing',
      leaseToken: claim.token,
      leaseOwner: h.consumer.name,
      attempt: 1,
    });
    expect(held.leaseUntil!.getTime()).toBeGreaterThan((await h.ledger.now()).getTime());
    expect(await attemptsOf(h.ledger, id)).toEqual([]);

    // Later the lease runs out and the item can be reclaimed (the expired attempt on record).
    await waitFor(
      async () => (await h.ledger.reclaimExpired({ queue: h.queue })).reclaimed.includes(id) || undefined,
      10_000,
      'the lease to expire',
    );
    expect(await h.item(id)).toMatchObject({ state: 'pending', attempt: 1, failureClass: 'lease_expired' });
    expect((await attemptsOf(h.ledger, id)).map((a) => [a.attempt, a.outcome, a.worker])).toEqual([
      [1, 'lease_expired', h.consumer.name],
    ]);
  },
);

test("a handler that runs for several leases keeps its item: the consumer's clock renews the lease", async () => {
  const LEASE_MS = 300;
  let startedAt = 0;
  const h = await harness(
    {
      long: async () => {
        startedAt = Date.now();
        await sleep(4 * LEASE_MS);
        return 'kept';
      },
    },
    // Sweeping (and reclaiming expired leases) every 100 ms: an unrenewed lease would be taken back.
    { leaseMs: LEASE_MS, pollIntervalMs: 100 },
  );
  const id = await h.enqueue({ type: 'long', payload: {} });
  expect(await h.waitOutcome(id, 'completed', 10_000)).toEqual(['completed']);
  expect(Date.now() - startedAt).toBeGreaterThanOrEqual(4 * LEASE_MS);
  expect(await h.item(id)).toMatchObject({ state: 'completed', result: 'kept', attempt: 1 });
  // Nothing but the run that kept its lease. On a loaded TiDB a claim can take most of a 300 ms lease
  // to come back, and the consumer then hands the item back unstarted (no attempt spent) and claims it
  // again: that history is the prefetch rule's, not a lease lost to a missed renewal.
  const history = await attemptsOf(h.ledger, id);
  expect(
    history.filter((a) => !(a.outcome === 'released' && a.error === 'prefetch wait exceeded a third of the lease')),
  ).toEqual([]);
  expect(h.consumer.counters).toMatchObject({ completed: 1, leaseLost: 0 });
});

test(
  'several long handlers have their leases renewed together: ' +
    'one statement per tick of the clock, not one per item',
  async () => {
    const LEASE_MS = 300;
    const renewals: number[] = [];
    const stopCounting = onEveryStatement((text) => {
      const m = /^UPDATE \S+ SET lease_until = .* WHERE id IN \((.*?)\) AND lease_token IN/s.exec(text);
      if (m) renewals.push(m[1]!.split(',').length);
    });
    cleanups.push(stopCounting);
    const h = await harness(
      { long: async () => void (await sleep(6 * LEASE_MS)) },
      { leaseMs: LEASE_MS, pollIntervalMs: 100, concurrency: 4 },
    );
    // The leases are taken at different moments, as a claim round, an offer and a lane's successor take
    // them: one item first, the other three once it has run for a fifth of a lease.
    const firstStarted = new Promise<void>((resolve) => h.consumer.once('started', () => resolve()));
    const first = await h.enqueue({ type: 'long', payload: {} });
    await firstStarted;
    // Not a wait for something to happen: the scenario is two leases a fifth of a lease apart.
    await sleep(LEASE_MS / 5);
    const rest = (
      await h.producer.enqueueMany(Array.from({ length: 3 }, () => ({ queue: h.queue, type: 'long', payload: {} })))
    ).map((r) => r.id);
    for (const id of [first, ...rest]) expect(await h.waitOutcome(id, 'completed', 10_000)).toEqual(['completed']);
    expect(h.consumer.counters).toMatchObject({ completed: 4, leaseLost: 0 });
    const renewed = renewals.reduce((a, b) => a + b, 0);
    // Each item was renewed several times (6 leases long, renewed every third of one)…
    expect(renewed).toBeGreaterThanOrEqual(4 * 4);
    // …and after the first renewal the four went out together: far fewer statements than renewals.
    expect(renewals.length * 3).toBeLessThanOrEqual(renewed);
  },
);

test("a deadline long enough for the consumer's clock still aborts the handler and releases the item", async () => {
  // leaseMs 240: the clock ticks every 20 ms, so a 500 ms deadline (25 ticks) has no timer of its own.
  const DEADLINE_MS = 500;
  const seen: { attempt: number; abortReason?: string; afterMs?: number }[] = [];
  const h = await harness(
    {
      slow: async (job: Job<unknown>, ctx: JobContext) => {
        const run: { attempt: number; abortReason?: string; afterMs?: number } = { attempt: job.attempt };
        seen.push(run);
        if (seen.length === 1) {
          const t0 = Date.now();
          run.abortReason = await aborted(ctx.signal);
          run.afterMs = Date.now() - t0;
          throw ctx.signal.reason;
        }
        return 'in time';
      },
    },
    { leaseMs: 240, deadlineMs: DEADLINE_MS, deadlineBackoffMs: 50 },
  );
  const id = await h.enqueue({ type: 'slow', payload: {}, maxAttempts: 1 });
  expect(await h.waitOutcome(id, 'completed')).toEqual(['released', 'completed']);
  expect(seen[0]).toMatchObject({ attempt: 1, abortReason: expect.stringMatching(/deadline/) });
  expect(seen[0]!.afterMs).toBeGreaterThanOrEqual(DEADLINE_MS - 5);
  expect(await h.item(id)).toMatchObject({ state: 'completed', result: 'in time', attempt: 1 });
  expect(h.consumer.counters).toMatchObject({ released: 1, completed: 1, retried: 0 });
});
