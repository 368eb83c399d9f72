/**
 * lanewake's phases for the cost workload (bench/workloads/cost.ts), each on a fresh database of its own, each
 * phase measured alone between two readings of the server's counters (bench/cost-meter.ts) and of the driver's
 * round trips (bench/sql-count.ts):
 * - pipeline: N items enqueued with enqueueMany in batches of 500, claimed in rounds of the consumer's size, then
 *   completed with completeMany in the completer's batches (500 laneless, 128 laned). A lane shows only its head,
 *   so laned items go in cycles: claim every head, complete them (their successors become heads), again.
 * - single enqueues: N ledger.enqueue calls, one after the other.
 * - engine: a Producer enqueues N items in batches of 500 (announced through Redis), then a no-op consumer drains.
 */
import type { EnqueueInput } from '../../src/ledger/inputs.js';
import type { ClaimedItem } from '../../src/ledger/types.js';
import { Producer } from '../../src/producer/producer.js';
import { addDeltas, type CostDelta, type SqlServerMeter } from '../cost-meter.js';
import { setPhase, takePhase } from '../sql-count.js';
import { completedInLedger, type Env, environment, noopConsumer, verifyOnce, waitUntil } from '../workload.js';

export const ENQUEUE_BATCH = 500;
const LEASE_MS = 600_000;
const IDLE = 'cost:idle';

export type Variant = 'laneless' | 'laned';
export const PHASES = ['enqueueBatch', 'enqueueSingle', 'claim', 'complete', 'engineEnqueue', 'engineDrain'] as const;
export type PhaseKey = (typeof PHASES)[number];

/** One phase of one run, in totals. */
export interface PhaseCost extends CostDelta {
  jobs: number;
  roundTrips: number;
  statements: number;
}
export type Phases = Partial<Record<PhaseKey, PhaseCost>>;

export interface CostSettings {
  serverUrl: string;
  jobs: number;
  lanes: number;
  claimRound: number;
  concurrency: number;
}

/** A fresh ledger (and wake channel) whose phases `measure` adds up: a phase measured in pieces is their sum. */
async function withBook(
  s: CostSettings,
  meter: SqlServerMeter,
  withRedis: boolean,
  run: (env: Env, measure: (phase: PhaseKey, fn: () => Promise<number>) => Promise<void>) => Promise<void>,
): Promise<Phases> {
  setPhase(IDLE);
  const env = await environment(withRedis, s.serverUrl);
  const database = new URL(env.url).pathname.slice(1);
  const costs = new Map<PhaseKey, { jobs: number; delta: CostDelta }>();
  const measure = async (phase: PhaseKey, fn: () => Promise<number>): Promise<void> => {
    const before = await meter.sample(database);
    setPhase(phase);
    const jobs = await fn();
    setPhase(IDLE);
    const delta = meter.delta(before, await meter.sample(database));
    const had = costs.get(phase);
    costs.set(phase, had ? { jobs: had.jobs + jobs, delta: addDeltas(had.delta, delta) } : { jobs, delta });
  };
  try {
    await env.ledger.capabilities(); // the pool connects and the server's family is asked before anything is timed
    takePhase(IDLE);
    await run(env, measure);
    return Object.fromEntries(
      [...costs].map(([phase, { jobs, delta }]) => [phase, { ...delta, jobs, ...takePhase(phase) }]),
    );
  } finally {
    setPhase(IDLE);
    await env.close();
    takePhase(IDLE);
  }
}

const inputs = (s: CostSettings, env: Env, laned: boolean, from: number, count: number): EnqueueInput[] =>
  Array.from({ length: count }, (_, k) => ({
    ...{ queue: env.queue, type: 'noop', payload: { n: from + k } },
    ...(laned ? { lane: `l${(from + k) % s.lanes}` } : {}),
  }));

async function enqueueInBatches(
  s: CostSettings,
  env: Env,
  laned: boolean,
  enqueueMany: (items: EnqueueInput[]) => Promise<unknown>,
): Promise<number> {
  for (let i = 0; i < s.jobs; i += ENQUEUE_BATCH)
    await enqueueMany(inputs(s, env, laned, i, Math.min(ENQUEUE_BATCH, s.jobs - i)));
  return s.jobs;
}

/** Enqueue in batches, claim every item, complete every item: each phase alone. */
export const pipeline = (s: CostSettings, meter: SqlServerMeter, variant: Variant): Promise<Phases> =>
  withBook(s, meter, false, async (env, measure) => {
    const laned = variant === 'laned';
    await measure('enqueueBatch', () => enqueueInBatches(s, env, laned, (items) => env.ledger.enqueueMany(items)));
    const batch = laned ? 128 : 500; // as src/consumer/completer.ts: laneless per statement, laned per transaction
    for (let completed = 0; completed < s.jobs; ) {
      const held: ClaimedItem[] = [];
      await measure('claim', async () => {
        // Rounds of `claimRound` until one comes back short: every head claimable now.
        for (let more = true; more; ) {
          const r = await env.ledger.claim({ queue: env.queue, owner: 'cost', leaseMs: LEASE_MS, limit: s.claimRound });
          held.push(...r.items);
          more = r.items.length === s.claimRound;
        }
        return held.length;
      });
      if (held.length === 0) throw new Error(`claims found nothing with ${s.jobs - completed} items left`);
      await measure('complete', async () => {
        for (let i = 0; i < held.length; i += batch) {
          const results = await env.ledger.completeMany(held.slice(i, i + batch).map((handle) => ({ handle })));
          if (results.some((r) => !r.won)) throw new Error('a completion lost its lease');
        }
        return held.length;
      });
      completed += held.length;
    }
    const completed = await completedInLedger(env);
    if (completed !== s.jobs) throw new Error(`${completed} of ${s.jobs} items completed in the ledger`);
  });

/** N items enqueued one call at a time, each its own transaction. */
export const singleEnqueues = (s: CostSettings, meter: SqlServerMeter, variant: Variant): Promise<Phases> =>
  withBook(s, meter, false, (env, measure) =>
    measure('enqueueSingle', async () => {
      for (let i = 0; i < s.jobs; i++) await env.ledger.enqueue(inputs(s, env, variant === 'laned', i, 1)[0]!);
      return s.jobs;
    }),
  );

/** The whole engine: the producer's bulk enqueue, then a no-op consumer draining the backlog. */
export const engine = (s: CostSettings, meter: SqlServerMeter, variant: Variant): Promise<Phases> =>
  withBook(s, meter, true, async (env, measure) => {
    const producer = new Producer({ ledger: env.ledger, wake: env.wake });
    await measure('engineEnqueue', () =>
      enqueueInBatches(s, env, variant === 'laned', (items) => producer.enqueueMany(items)),
    );
    const seen = new Map<string, number>();
    const consumer = noopConsumer(env, s.concurrency, seen);
    try {
      await measure('engineDrain', async () => {
        await consumer.start();
        await waitUntil(() => consumer.counters.completed >= s.jobs, 600_000, 'the backlog to drain');
        return s.jobs;
      });
    } finally {
      await consumer.stop();
    }
    await verifyOnce(env, seen, s.jobs);
  });
