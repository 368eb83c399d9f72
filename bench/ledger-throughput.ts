/**
 * The ledger benchmark's throughput runs (bench/ledger.ts): batched enqueue,
 * and concurrent claim + completeMany until the queue is empty, in own lanes
 * or shared ones, each verified before it counts.
 */
import { sql } from 'kysely';
import { formatCount, type ClaimedItem, type Ledger } from '../src/index.js';
import { cpuSample, cpuShare, fmt, isInterrupted, nowMs, sleep, waitForQuiet, type CpuShare } from './support.js';
import { completedInLedger } from './engine.js';
import {
  CLAIM_LIMIT,
  ENQUEUE_BATCH,
  LEASE_MS,
  QUEUE,
  VerificationFailed,
  countWhere,
  cpuPerItem,
  enqueueInBatches,
  ownLaneInputs,
  sharedLaneInputs,
  withFreshLedger,
} from './ledger-fixtures.js';

/**
 * A claimer loop that sees no completion anywhere for this long fails the run (a lost item would otherwise hang it).
 */
const STALL_MS = 60_000;

// ---------------------------------------------------------------------------
// 1. Batched enqueue.

export async function benchEnqueue(
  count: number,
  lanes: number | null,
): Promise<{ value: number; note: string; cpu: CpuShare }> {
  return withFreshLedger(async ({ ledger }) => {
    const inputs = lanes === null ? ownLaneInputs(count) : sharedLaneInputs(count, lanes);
    await ledger.now(); // opens the connection outside the timed part
    await waitForQuiet();
    const cpu0 = cpuSample();
    const t0 = nowMs();
    await enqueueInBatches(ledger, inputs, ENQUEUE_BATCH);
    const wallMs = nowMs() - t0;
    const cpu = cpuShare(cpu0);
    const stored = await countWhere(ledger, sql`state = 'pending'`);
    if (stored !== count) throw new VerificationFailed(`stored ${stored} of ${count} items`);
    return {
      value: count / (wallMs / 1000),
      note: `${fmt(count)} items in ${fmt(wallMs)} ms; ${cpuPerItem(cpu, count, wallMs)}`,
      cpu,
    };
  });
}

// ---------------------------------------------------------------------------
// 2, 3. Concurrent claim + completeMany until the queue is empty.

interface DrainState {
  inFlight: number;
  completionEvents: number;
  lastProgressMs: number;
  completed: number;
  lostCas: number;
  claimCalls: number;
  emptyClaims: number;
  claimedIds: Set<string>;
  doubleClaims: number;
  /** Per lane, the laneSeq of the last item seen completing; completions must be strictly increasing. */
  lastSeqByLane: Map<string, number>;
  orderViolations: string[];
  failure: string | undefined;
}

async function claimerLoop(k: number, ledger: Ledger, s: DrainState): Promise<void> {
  const owner = `bench-claimer-${k}`;
  try {
    for (;;) {
      if (s.failure !== undefined || isInterrupted()) return;
      const inFlightBefore = s.inFlight;
      const eventsBefore = s.completionEvents;
      s.claimCalls++;
      const claimed = await ledger.claim({ queue: QUEUE, owner, limit: CLAIM_LIMIT, leaseMs: LEASE_MS });
      if (claimed.items.length === 0) {
        s.emptyClaims++;
        // Empty, and nothing was held or finished while this claim looked: the
        // queue has no due head left. (Another loop still running may yet
        // finish a lane head and unlock its successor; that loop goes on.)
        if (inFlightBefore === 0 && s.inFlight === 0 && s.completionEvents === eventsBefore) return;
        if (nowMs() - s.lastProgressMs > STALL_MS) {
          s.failure ??= `no progress for ${STALL_MS} ms with ${s.inFlight} items in flight`;
          return;
        }
        await sleep(1);
        continue;
      }
      s.inFlight += claimed.items.length;
      for (const it of claimed.items) {
        if (s.claimedIds.has(it.id)) s.doubleClaims++;
        else s.claimedIds.add(it.id);
      }
      const results = await ledger.completeMany(claimed.items.map((handle: ClaimedItem) => ({ handle })));
      s.inFlight -= claimed.items.length;
      s.completionEvents++;
      s.lastProgressMs = nowMs();
      results.forEach((r, i) => {
        const it = claimed.items[i]!;
        if (!r.won) {
          s.lostCas++;
          return;
        }
        s.completed++;
        if (it.lane !== null) {
          const seq = it.laneSeq ?? -1;
          const last = s.lastSeqByLane.get(it.lane);
          if (last !== undefined && seq <= last && s.orderViolations.length < 10) {
            s.orderViolations.push(`${it.lane}: seq ${seq} completed after ${last}`);
          }
          if (last === undefined || seq > last) s.lastSeqByLane.set(it.lane, seq);
        }
      });
    }
  } catch (error) {
    s.failure ??= `claimer ${k}: ${error instanceof Error ? error.message : String(error)}`;
  }
}

export async function benchClaimComplete(
  count: number,
  lanes: number | null,
  claimers: number,
): Promise<{ value: number; note: string; cpu: CpuShare }> {
  return withFreshLedger(async ({ ledger, open }) => {
    const inputs = lanes === null ? ownLaneInputs(count) : sharedLaneInputs(count, lanes);
    await enqueueInBatches(ledger, inputs, ENQUEUE_BATCH);
    const workers = Array.from({ length: claimers }, () => open(2));
    await Promise.all(workers.map((w) => w.now())); // connections open before the clock starts
    await waitForQuiet();

    const s: DrainState = {
      inFlight: 0,
      completionEvents: 0,
      lastProgressMs: nowMs(),
      completed: 0,
      lostCas: 0,
      claimCalls: 0,
      emptyClaims: 0,
      claimedIds: new Set(),
      doubleClaims: 0,
      lastSeqByLane: new Map(),
      orderViolations: [],
      failure: undefined,
    };
    const cpu0 = cpuSample();
    const t0 = nowMs();
    await Promise.all(workers.map((w, k) => claimerLoop(k, w, s)));
    const wallMs = nowMs() - t0;
    const cpu = cpuShare(cpu0);

    // Verification: every item completed exactly once, lanes in order.
    const problems: string[] = [];
    if (s.failure !== undefined) problems.push(s.failure);
    if (s.completed !== count) problems.push(`completed ${s.completed} of ${count}`);
    if (s.lostCas > 0) problems.push(`${s.lostCas} completions lost their CAS`);
    if (s.doubleClaims > 0) problems.push(`${s.doubleClaims} items claimed twice`);
    if (s.orderViolations.length > 0) problems.push(`lane order violated: ${s.orderViolations.join('; ')}`);
    const [stats] = await ledger.stats(QUEUE);
    const counts = stats?.counts;
    if (!counts) problems.push('stats: queue missing');
    else {
      const completed = await completedInLedger({ ledger, queue: QUEUE });
      if (completed !== count) problems.push(`completed ${completed} of ${count} in the ledger`);
      // Any other state above 0 is a problem, a floor included (a capped count is never 0).
      const other = Object.entries(counts).filter(([state, n]) => state !== 'completed' && n.count > 0);
      if (other.length > 0)
        problems.push(`stats: left ${other.map(([st, n]) => `${formatCount(n)} ${st}`).join(', ')}`);
    }
    const reclaimed = await countWhere(ledger, sql`attempt <> 1`);
    if (reclaimed > 0) problems.push(`${reclaimed} items were claimed more than once (attempt <> 1)`);
    if (lanes !== null) {
      // Ledger-clock check of the same rule: item k+1 of a lane started no earlier
      // than item k ended. A window function keeps it one scan and one sort; a
      // self-join was planned badly right after the run (over a minute).
      const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM (
          SELECT started_at, LAG(terminal_at) OVER (PARTITION BY lane ORDER BY lane_seq) AS prev_end
          FROM ${ledger.tables.items} WHERE queue = ${QUEUE} AND lane IS NOT NULL
        ) x WHERE x.started_at < x.prev_end`.execute(ledger.db);
      const overlaps = Number(r.rows[0]?.n ?? 0);
      if (overlaps > 0) problems.push(`${overlaps} lane items started before their predecessor ended`);
      // A lane with unfinished items has busy_from above 0 (schema step of busy_from, migration-steps.ts).
      const busy = await sql<{
        n: number | string;
      }>`SELECT COUNT(*) AS n FROM ${ledger.tables.lanes} WHERE busy_from <> 0`.execute(ledger.db);
      const busyLanes = Number(busy.rows[0]?.n ?? 0);
      if (busyLanes > 0) problems.push(`${busyLanes} lane rows still count unfinished items`);
      if (s.lastSeqByLane.size !== lanes) problems.push(`saw ${s.lastSeqByLane.size} of ${lanes} lanes complete`);
    }
    if (problems.length > 0) throw new VerificationFailed(`verification failed: ${problems.join(' | ')}`);

    const perClaim = s.completed / Math.max(1, s.claimCalls - s.emptyClaims);
    const note =
      `${fmt(count)} items in ${fmt(wallMs)} ms; ${fmt(s.claimCalls)} claims ` +
      `(${fmt(s.emptyClaims)} empty), ${fmt(perClaim, 1)} items/claim; ` +
      `${cpuPerItem(cpu, count, wallMs)}; verified`;
    return { value: count / (wallMs / 1000), note, cpu };
  });
}
