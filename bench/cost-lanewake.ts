/**
 * lanewake's workloads for bench/cost.ts, each on a fresh database of its
 * own (dropped after), each phase measured alone between two readings of
 * the counters (cost-meter.ts) and of the driver's round trips (sql-count.ts):
 *
 * - pipeline: N items enqueued with enqueueMany in batches of 500 (the
 *   engine's bulk enqueue), claimed in rounds of the consumer's size, then
 *   completed with completeMany in the completer's batches (500 laneless,
 *   128 laned). A lane shows only its head, so laned items go in cycles:
 *   claim every head, complete them (their successors become heads), again;
 *   each cycle's claim and completion are added to their phase.
 * - lane affinity (laned): the first heads claimed, then every completion
 *   batch claims the new heads it makes (completeManyClaimingNext), as the
 *   consumer's completer does: the claims ride in the completions.
 * - single enqueues: N ledger.enqueue calls, one after the other.
 * - engine: a Producer enqueues N items in batches of 500 (announced through
 *   Redis), then a no-op consumer drains them (bench/engine.ts's (a)).
 */
import { randomBytes } from 'node:crypto';
import type { Consumer } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import type { EnqueueInput } from '../src/ledger/inputs.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { createLogger } from '../src/log.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { completedInLedger, noopConsumer, verifyOnce, waitUntil, type Env } from './workload.js';
import { addDeltas, type CostDelta, type SqlServerMeter } from './cost-meter.js';
import { setPhase, takePhase } from './sql-count.js';
import { createBenchDatabase, median } from './support.js';

/** As src/consumer/completer.ts: laneless completions per statement, laned per transaction. */
export const LANELESS_COMPLETION_BATCH = 500;
export const LANED_COMPLETION_BATCH = 128;
/** As bench/engine.ts and the producer's bulk users: items per enqueueMany. */
export const ENQUEUE_BATCH = 500;
const OWNER = 'cost-bench';
const LEASE_MS = 600_000;
const COUNTERS_PHASE = 'cost:counters';
const IDLE_PHASE = 'cost:idle';

export type Variant = 'laneless' | 'laned';
export type PhaseKey =
  | 'enqueueBatch'
  | 'enqueueSingle'
  | 'claim'
  | 'complete'
  | 'affinityClaim'
  | 'affinityComplete'
  | 'engineEnqueue'
  | 'engineDrain';

/** One phase of one run, in totals. */
export interface PhaseCost extends CostDelta {
  jobs: number;
  /** Counted at the driver (bench/sql-count.ts). */
  roundTrips: number;
  statements: number;
}

/** What the engine's consumer did while draining: how its items were claimed. */
export interface EngineCounts {
  claimRounds: number;
  /** Median items claimed per claim round. */
  medianRoundSize: number;
  claimed: number;
  claimedWithCompletion: number;
  completed: number;
}

export interface CostSettings {
  serverUrl: string;
  redisUrl: string;
  jobs: number;
  lanes: number;
  claimRound: number;
  concurrency: number;
  tidbTxnMode: 'pessimistic' | 'optimistic' | undefined;
}

const log = createLogger('bench', process.env.LANEWAKE_LOG_LEVEL ?? 'warn');

/**
 * The phases of one workload: each measure() reads the counters before and
 * after `fn` and adds what it cost to its phase (a phase measured in several
 * pieces is their sum).
 */
class PhaseBook {
  private readonly costs = new Map<PhaseKey, { jobs: number; delta: CostDelta }>();

  constructor(
    private readonly meter: SqlServerMeter,
    private readonly database: string,
    private readonly tag: string,
  ) {}

  /** `fn` answers how many jobs it did. */
  async measure(phase: PhaseKey, fn: () => Promise<number>): Promise<void> {
    setPhase(COUNTERS_PHASE);
    const before = await this.meter.sample(this.database);
    setPhase(this.key(phase));
    const jobs = await fn();
    setPhase(COUNTERS_PHASE);
    const after = await this.meter.sample(this.database);
    setPhase(IDLE_PHASE);
    takePhase(COUNTERS_PHASE);
    const delta = this.meter.delta(before, after);
    const had = this.costs.get(phase);
    this.costs.set(
      phase,
      had === undefined ? { jobs, delta } : { jobs: had.jobs + jobs, delta: addDeltas(had.delta, delta) },
    );
  }

  results(): Partial<Record<PhaseKey, PhaseCost>> {
    const out: Partial<Record<PhaseKey, PhaseCost>> = {};
    for (const [phase, { jobs, delta }] of this.costs) {
      const shapes = takePhase(this.key(phase));
      const roundTrips = shapes.reduce((n, s) => n + s.count, 0);
      const statements = shapes.reduce((n, s) => n + s.count * s.statements, 0);
      out[phase] = { ...delta, jobs, roundTrips, statements };
    }
    return out;
  }

  private key(phase: PhaseKey): string {
    return `${this.tag}/${phase}`;
  }
}

interface Workspace {
  env: Env;
  database: string;
  book: PhaseBook;
}

async function openWorkspace(
  s: CostSettings,
  meter: SqlServerMeter,
  withRedis: boolean,
  tag: string,
): Promise<Workspace> {
  setPhase(IDLE_PHASE);
  const db = await createBenchDatabase('lwc', s.serverUrl);
  const ledger = new Ledger({
    url: db.url,
    poolSize: 12,
    ...(s.tidbTxnMode !== undefined ? { tidbTxnMode: s.tidbTxnMode } : {}),
  });
  const keyPrefix = `lwcost:${randomBytes(4).toString('hex')}:`;
  const wake = withRedis ? new WakeChannel({ redis: s.redisUrl, keyPrefix, logger: log }) : undefined;
  const env: Env = {
    url: db.url,
    keyPrefix,
    ledger,
    wake,
    queue: 'cost',
    close: async () => {
      setPhase(IDLE_PHASE);
      await wake?.timers.close();
      await wake?.dropKeys();
      await wake?.close();
      await ledger.close();
      await db.drop();
      takePhase(IDLE_PHASE);
    },
  };
  try {
    await ledger.migrate();
    // The pool connects and the server's family is asked before anything is measured.
    await ledger.capabilities();
  } catch (error) {
    await env.close();
    throw error;
  }
  return { env, database: db.name, book: new PhaseBook(meter, db.name, tag) };
}

function inputs(s: CostSettings, env: Env, laned: boolean, from: number, count: number): EnqueueInput[] {
  return Array.from({ length: count }, (_, k) => ({
    queue: env.queue,
    type: 'noop',
    payload: { n: from + k },
    ...(laned ? { lane: `l${(from + k) % s.lanes}` } : {}),
  }));
}

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

/** Claim rounds of `claimRound` until one comes back short: every head claimable now. */
async function claimAllHeads(s: CostSettings, env: Env): Promise<ClaimedItem[]> {
  const held: ClaimedItem[] = [];
  for (;;) {
    const r = await env.ledger.claim({ queue: env.queue, owner: OWNER, leaseMs: LEASE_MS, limit: s.claimRound });
    held.push(...r.items);
    if (r.items.length < s.claimRound) return held;
  }
}

async function completeInBatches(env: Env, held: readonly ClaimedItem[], batch: number): Promise<number> {
  for (let i = 0; i < held.length; i += batch) {
    const results = await env.ledger.completeMany(held.slice(i, i + batch).map((handle) => ({ handle })));
    const lost = results.filter((r) => !r.won).length;
    if (lost > 0) throw new Error(`${lost} completions lost their lease`);
  }
  return held.length;
}

async function expectCompleted(env: Env, jobs: number): Promise<void> {
  const completed = await completedInLedger(env);
  if (completed !== jobs) throw new Error(`${completed} of ${jobs} items completed in the ledger`);
}

/** Enqueue in batches, claim every item, complete every item: each phase alone. */
export async function pipeline(
  s: CostSettings,
  meter: SqlServerMeter,
  variant: Variant,
  tag: string,
): Promise<Partial<Record<PhaseKey, PhaseCost>>> {
  const laned = variant === 'laned';
  const { env, book } = await openWorkspace(s, meter, false, tag);
  try {
    await book.measure('enqueueBatch', () => enqueueInBatches(s, env, laned, (items) => env.ledger.enqueueMany(items)));
    const batch = laned ? LANED_COMPLETION_BATCH : LANELESS_COMPLETION_BATCH;
    let completed = 0;
    while (completed < s.jobs) {
      let held: ClaimedItem[] = [];
      await book.measure('claim', async () => (held = await claimAllHeads(s, env)).length);
      if (held.length === 0) throw new Error(`claims found nothing with ${s.jobs - completed} items left`);
      await book.measure('complete', () => completeInBatches(env, held, batch));
      completed += held.length;
    }
    setPhase(IDLE_PHASE);
    await expectCompleted(env, s.jobs);
    return book.results();
  } finally {
    await env.close();
  }
}

/** Laned, as the consumer completes: each completion batch claims the heads it makes under a fresh lease. */
export async function laneAffinity(
  s: CostSettings,
  meter: SqlServerMeter,
  tag: string,
): Promise<Partial<Record<PhaseKey, PhaseCost>>> {
  const { env, book } = await openWorkspace(s, meter, false, tag);
  try {
    await enqueueInBatches(s, env, true, (items) => env.ledger.enqueueMany(items));
    let held: ClaimedItem[] = [];
    await book.measure('affinityClaim', async () => (held = await claimAllHeads(s, env)).length);
    await book.measure('affinityComplete', async () => {
      let completed = 0;
      const waiting = [...held];
      while (waiting.length > 0) {
        const batch = waiting.splice(0, LANED_COMPLETION_BATCH);
        const next = {
          owner: OWNER,
          token: randomBytes(12).toString('base64url'),
          leaseMs: LEASE_MS,
          max: batch.length,
        };
        const { results, claimed } = await env.ledger.completeManyClaimingNext(
          batch.map((handle) => ({ handle })),
          next,
        );
        if (results.some((r) => !r.won)) throw new Error('a completion lost its lease');
        waiting.push(...claimed);
        completed += batch.length;
      }
      return completed;
    });
    setPhase(IDLE_PHASE);
    await expectCompleted(env, s.jobs);
    return book.results();
  } finally {
    await env.close();
  }
}

/** N items enqueued one call at a time, each its own transaction. */
export async function singleEnqueues(
  s: CostSettings,
  meter: SqlServerMeter,
  variant: Variant,
  tag: string,
): Promise<Partial<Record<PhaseKey, PhaseCost>>> {
  const { env, book } = await openWorkspace(s, meter, false, tag);
  try {
    await book.measure('enqueueSingle', async () => {
      for (let i = 0; i < s.jobs; i++) {
        const [input] = inputs(s, env, variant === 'laned', i, 1);
        await env.ledger.enqueue(input!);
      }
      return s.jobs;
    });
    return book.results();
  } finally {
    await env.close();
  }
}

/** The whole engine: the producer's bulk enqueue, then a no-op consumer draining the backlog. */
export async function engine(
  s: CostSettings,
  meter: SqlServerMeter,
  variant: Variant,
  tag: string,
): Promise<{ phases: Partial<Record<PhaseKey, PhaseCost>>; counts: EngineCounts }> {
  const { env, book } = await openWorkspace(s, meter, true, tag);
  let consumer: Consumer | undefined;
  try {
    const producer = new Producer({ ledger: env.ledger, wake: env.wake });
    await book.measure('engineEnqueue', () =>
      enqueueInBatches(s, env, variant === 'laned', (items) => producer.enqueueMany(items)),
    );
    const seen = new Map<string, number>();
    const rounds: number[] = [];
    const draining = noopConsumer(env, s.concurrency, seen);
    consumer = draining;
    draining.on('claimRound', (r) => void rounds.push(r.claimed));
    await book.measure('engineDrain', async () => {
      await draining.start();
      await waitUntil(() => draining.counters.completed >= s.jobs, 600_000, 'the backlog to drain');
      return s.jobs;
    });
    setPhase(IDLE_PHASE);
    const c = draining.counters;
    const counts: EngineCounts = {
      claimRounds: c.claimRounds,
      medianRoundSize: median(rounds),
      claimed: c.claimed,
      claimedWithCompletion: c.claimedWithCompletion,
      completed: c.completed,
    };
    await draining.stop();
    consumer = undefined;
    await verifyOnce(env, seen, s.jobs);
    return { phases: book.results(), counts };
  } finally {
    await consumer?.stop().catch(() => undefined);
    await env.close();
  }
}
