/**
 * Ledger benchmark: batched enqueue, concurrent claim+complete (own lanes and
 * 1,000 shared lanes), and single-claim latency with and without one deep lane.
 *
 *   npm run bench:ledger                       # full run, 3 runs per measurement
 *   npm run bench:ledger -- --runs 1 --scale 0.1
 *   npm run bench:ledger -- --json             # last stdout line: one JSON object
 *
 * Options: --runs N (default 3), --scale F (multiplies item counts, default 1),
 * --json, --claimers N (default 4), --only enqueue,own,shared,latency.
 * Server: LANEWAKE_BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306).
 *
 * Every run of every measurement uses a fresh database (lwb_<random>),
 * migrated with ledger.migrate() and dropped afterwards (also on error and
 * SIGINT). Each reported figure is the median of the runs; min–max is shown
 * next to it. A claim+complete run that loses an item, completes one twice
 * or breaks lane order is reported as a failure, never as a number.
 *
 * On a shared machine: each timed part starts once the machine was less than
 * 25% busy for 300 ms (waiting at most 3 s), and every run reports the CPU
 * used meanwhile by node, by the server and by everything else ("other %",
 * the noise), plus CPU time per item, which moves less with noise than items/s.
 * Claim latency alternates claims between the two queues so noise falls on
 * both sides alike.
 *
 * Output: tables on stdout, then (with --json) one JSON line last; the same
 * six figures plus `meta` (code revision, sizes, extra medians) are written
 * to bench/results/ledger-latest.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { sql, type RawBuilder } from 'kysely';
import type { RowDataPacket } from 'mysql2/promise';
import { Ledger, type ClaimedItem, type EnqueueInput } from '../src/index.js';
import {
  benchServerUrl,
  codeRevision,
  cpuSample,
  cpuShare,
  createBenchDatabase,
  fmt,
  isInterrupted,
  median,
  minMax,
  nowMs,
  percentile,
  printTable,
  progress,
  runCleanups,
  sleep,
  waitForQuiet,
  withAdmin,
  type CpuShare,
} from './support.js';
import { completedInLedger } from './engine.js';

const QUEUE = 'bench';
const TYPE = 'noop';
const SHARED_LANES = 1_000;
const ENQUEUE_BATCH = 500;
const DEEP_LANE_BATCH = 1_000;
const CLAIM_LIMIT = 32;
const LEASE_MS = 30_000;
const LATENCY_WARMUP = 20;
/** Single-item complete() probes per side (informational; the deep side can be slow). */
const COMPLETE_PROBES = 10;
/** A claimer loop that sees no completion anywhere for this long fails the run (a lost item would otherwise hang it). */
const STALL_MS = 60_000;

const TARGETS = {
  claimCompleteOwn: 12_000,
  claimCompleteShared: 6_000,
  deepLaneRatio: 1.2,
};

type Scenario = 'enqueue' | 'own' | 'shared' | 'latency';
const SCENARIOS: readonly Scenario[] = ['enqueue', 'own', 'shared', 'latency'];

interface Options {
  runs: number;
  scale: number;
  json: boolean;
  claimers: number;
  only: ReadonlySet<Scenario>;
}

interface Sizes {
  enqueueItems: number;
  claimItems: number;
  latencyHeads: number;
  latencySamples: number;
  deepLaneItems: number;
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '3' },
      scale: { type: 'string', default: '1' },
      json: { type: 'boolean', default: false },
      claimers: { type: 'string', default: '4' },
      only: { type: 'string', default: SCENARIOS.join(',') },
    },
    strict: true,
    allowPositionals: false,
  });
  const runs = Number(values.runs);
  const scale = Number(values.scale);
  const claimers = Number(values.claimers);
  if (!Number.isInteger(runs) || runs < 1) throw new Error('--runs must be a positive integer');
  if (!Number.isFinite(scale) || scale <= 0) throw new Error('--scale must be a positive number');
  if (!Number.isInteger(claimers) || claimers < 1) throw new Error('--claimers must be a positive integer');
  const only = new Set<Scenario>();
  for (const s of values.only.split(',').map((x) => x.trim()).filter((x) => x !== '')) {
    if (!(SCENARIOS as readonly string[]).includes(s)) throw new Error(`--only: unknown scenario ${s} (${SCENARIOS.join(', ')})`);
    only.add(s as Scenario);
  }
  return { runs, scale, json: values.json, claimers, only };
}

function sizes(scale: number): Sizes {
  const n = (base: number, floor: number): number => Math.max(floor, Math.round(base * scale));
  const latencySamples = n(500, 50);
  return {
    enqueueItems: n(50_000, 1_000),
    claimItems: n(40_000, 1_000),
    latencySamples,
    latencyHeads: Math.max(n(2_000, 200), latencySamples + LATENCY_WARMUP + 100),
    deepLaneItems: n(100_000, 1_000),
  };
}

// ---------------------------------------------------------------------------
// Fixtures.

/** ~100 bytes of JSON, the size of a typical "do X to entity Y" job. */
function payload(i: number): { n: number; entity: string; op: string } {
  return { n: i, entity: `acct_${(i * 2_654_435_761) % 1_000_003}`.padEnd(40, '0'), op: 'sync' };
}

function ownLaneInputs(count: number, offset = 0): EnqueueInput[] {
  return Array.from({ length: count }, (_, i) => ({ queue: QUEUE, type: TYPE, payload: payload(offset + i) }));
}

function laneName(k: number): string {
  return `lane-${String(k).padStart(4, '0')}`;
}

function sharedLaneInputs(count: number, lanes: number): EnqueueInput[] {
  return Array.from({ length: count }, (_, i) => ({ queue: QUEUE, type: TYPE, payload: payload(i), lane: laneName(i % lanes) }));
}

async function enqueueInBatches(ledger: Ledger, inputs: readonly EnqueueInput[], batch: number): Promise<void> {
  for (let i = 0; i < inputs.length; i += batch) {
    if (isInterrupted()) throw new Error('interrupted');
    await ledger.enqueueMany(inputs.slice(i, i + batch));
  }
}

/** A fresh database with a migrated ledger; everything is closed and dropped when `fn` ends, however it ends. */
async function withFreshLedger<T>(fn: (ctx: { url: string; ledger: Ledger; open: (poolSize: number) => Ledger }) => Promise<T>): Promise<T> {
  const db = await createBenchDatabase('lwb');
  const opened: Ledger[] = [];
  const open = (poolSize: number): Ledger => {
    const l = new Ledger({ url: db.url, poolSize });
    opened.push(l);
    return l;
  };
  try {
    const ledger = open(2);
    await ledger.migrate();
    return await fn({ url: db.url, ledger, open });
  } finally {
    for (const l of opened) await l.close().catch(() => undefined);
    await db.drop();
  }
}

async function countWhere(ledger: Ledger, where: RawBuilder<unknown>): Promise<number> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items} WHERE ${where}`.execute(ledger.db);
  return Number(r.rows[0]?.n ?? 0);
}

// ---------------------------------------------------------------------------
// Results.

type RunOutcome<T> = { ok: true; value: T; note: string; cpu?: CpuShare } | { ok: false; error: string };

async function attempt<T>(fn: () => Promise<{ value: T; note: string; cpu?: CpuShare }>): Promise<RunOutcome<T>> {
  try {
    const r = await fn();
    return { ok: true, ...r };
  } catch (error) {
    if (isInterrupted()) throw error;
    return { ok: false, error: error instanceof Error ? error.message : String(error) };
  }
}

class VerificationFailed extends Error {}

/** CPU time per item, node and server: steadier than items/s on a noisy machine. */
function cpuPerItem(cpu: CpuShare, items: number, wallMs: number): string {
  const us = (pct: number | undefined): string => (pct === undefined ? '—' : fmt(((pct / 100) * wallMs * 1000) / items));
  return `CPU/item node ${us(cpu.nodePct)} µs, db ${us(cpu.serverPct)} µs`;
}

// ---------------------------------------------------------------------------
// 1. Batched enqueue.

async function benchEnqueue(count: number, lanes: number | null): Promise<{ value: number; note: string; cpu: CpuShare }> {
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
    return { value: count / (wallMs / 1000), note: `${fmt(count)} items in ${fmt(wallMs)} ms; ${cpuPerItem(cpu, count, wallMs)}`, cpu };
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

async function benchClaimComplete(count: number, lanes: number | null, claimers: number): Promise<{ value: number; note: string; cpu: CpuShare }> {
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
      const other = Object.entries(counts).filter(([state, n]) => state !== 'completed' && n > 0);
      if (other.length > 0) problems.push(`stats: left ${other.map(([st, n]) => `${n} ${st}`).join(', ')}`);
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
      const busy = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.lanes} WHERE active <> 0`.execute(ledger.db);
      const busyLanes = Number(busy.rows[0]?.n ?? 0);
      if (busyLanes > 0) problems.push(`${busyLanes} lane rows still count unfinished items`);
      if (s.lastSeqByLane.size !== lanes) problems.push(`saw ${s.lastSeqByLane.size} of ${lanes} lanes complete`);
    }
    if (problems.length > 0) throw new VerificationFailed(`verification failed: ${problems.join(' | ')}`);

    const perClaim = s.completed / Math.max(1, s.claimCalls - s.emptyClaims);
    const note =
      `${fmt(count)} items in ${fmt(wallMs)} ms; ${fmt(s.claimCalls)} claims (${fmt(s.emptyClaims)} empty), ${fmt(perClaim, 1)} items/claim; ` +
      `${cpuPerItem(cpu, count, wallMs)}; verified`;
    return { value: count / (wallMs / 1000), note, cpu };
  });
}

// ---------------------------------------------------------------------------
// 4. Claim latency, without and with one deep lane.

interface LatencyRun {
  p50: number;
  p99: number;
  deepP50: number;
  deepP99: number;
  ratio: number;
  deepEnqueueItemsS: number;
  deepHeadClaims: number;
  /** Informational: single-item complete() of a lane head, in a short lane (A) and in the deep lane (B). */
  completeLaneHeadP50: number;
  completeDeepHeadP50: number;
}

/**
 * Two fresh databases are prepared side by side: A holds `heads` own-lane
 * items; B holds one lane of `deepItems` items (enqueued first, so its head
 * is among the oldest claimable heads) plus the same `heads` own-lane items.
 * Then single claims (limit 1, each followed by an untimed complete)
 * alternate A, B, B, A, … so the machine's noise falls on both sides alike.
 */
async function benchLatency(sz: Sizes): Promise<{ value: LatencyRun; note: string; cpu: CpuShare }> {
  return withFreshLedger(async ({ ledger: a }) =>
    withFreshLedger(async ({ ledger: b }) => {
      await enqueueInBatches(a, ownLaneInputs(sz.latencyHeads), ENQUEUE_BATCH);
      const deep = Array.from({ length: sz.deepLaneItems }, (_, i): EnqueueInput => ({ queue: QUEUE, type: TYPE, payload: payload(i), lane: 'deep' }));
      const t0 = nowMs();
      await enqueueInBatches(b, deep, DEEP_LANE_BATCH);
      const deepEnqueueItemsS = sz.deepLaneItems / ((nowMs() - t0) / 1000);
      await enqueueInBatches(b, ownLaneInputs(sz.latencyHeads), ENQUEUE_BATCH);

      // Completion is untimed and goes through completeMany (the batch path the
      // throughput runs use): the single-item complete() of a deep-lane head is
      // measured separately below, because it is slow enough to dominate the run.
      const one = async (l: Ledger, record: number[] | null): Promise<string | null> => {
        const start = nowMs();
        const c = await l.claim({ queue: QUEUE, owner: 'bench-latency', limit: 1, leaseMs: LEASE_MS });
        const ms = nowMs() - start;
        const item = c.items[0];
        if (c.items.length !== 1 || !item) throw new VerificationFailed(`claim(limit 1) returned ${c.items.length} items from a full queue`);
        if (record) record.push(ms);
        const [done] = await l.completeMany([{ handle: item }]);
        if (!done?.won) throw new VerificationFailed(`complete lost its CAS for ${item.id}`);
        return item.lane;
      };

      for (let i = 0; i < LATENCY_WARMUP; i++) {
        await one(a, null);
        await one(b, null);
      }
      await waitForQuiet();
      const without: number[] = [];
      const withDeep: number[] = [];
      let deepHeadClaims = 0;
      const cpu0 = cpuSample();
      for (let i = 0; i < sz.latencySamples; i++) {
        if (isInterrupted()) throw new Error('interrupted');
        const order: [Ledger, number[]][] = i % 2 === 0 ? [[a, without], [b, withDeep]] : [[b, withDeep], [a, without]];
        for (const [l, rec] of order) {
          const lane = await one(l, rec);
          if (l === b && lane === 'deep') deepHeadClaims++;
        }
      }
      const cpu = cpuShare(cpu0);

      // Informational probe: complete() (the single-item path) of a lane head,
      // in a short lane of A and in B's deep lane. Lane bookkeeping should not
      // depend on how deep the lane is either (docs/design.md §3).
      await enqueueInBatches(a, Array.from({ length: COMPLETE_PROBES + 1 }, (_, i): EnqueueInput => ({ queue: QUEUE, type: TYPE, payload: payload(i), lane: 'short' })), ENQUEUE_BATCH);
      const completeShort: number[] = [];
      const completeDeep: number[] = [];
      for (let i = 0; i < COMPLETE_PROBES; i++) {
        for (const [l, lane, rec] of [[a, 'short', completeShort], [b, 'deep', completeDeep]] as const) {
          const head = await sql<{ id: string }>`SELECT id FROM ${l.tables.items}
            WHERE queue = ${QUEUE} AND lane = ${lane} AND state = 'pending' AND is_head = 1 ORDER BY lane_seq LIMIT 1`.execute(l.db);
          const id = head.rows[0]?.id;
          if (id === undefined) throw new VerificationFailed(`lane ${lane} has no head`);
          const [item] = await l.claimByIds({ queue: QUEUE, owner: 'bench-latency', leaseMs: LEASE_MS, ids: [id] });
          if (!item) throw new VerificationFailed(`claimByIds lost the head of lane ${lane}`);
          const start = nowMs();
          const done = await l.complete(item);
          rec.push(nowMs() - start);
          if (!done.won) throw new VerificationFailed(`complete lost its CAS for ${item.id}`);
        }
      }

      const p50 = percentile(without, 50);
      const deepP50 = percentile(withDeep, 50);
      const value: LatencyRun = {
        p50,
        p99: percentile(without, 99),
        deepP50,
        deepP99: percentile(withDeep, 99),
        ratio: deepP50 / p50,
        deepEnqueueItemsS,
        deepHeadClaims,
        completeLaneHeadP50: percentile(completeShort, 50),
        completeDeepHeadP50: percentile(completeDeep, 50),
      };
      const note = `${fmt(sz.latencySamples)} claims per side; ${deepHeadClaims} of them took the deep lane's head`;
      return { value, note, cpu };
    }),
  );
}

// ---------------------------------------------------------------------------
// Driver.

interface Metric {
  label: string;
  unit: string;
  digits: number;
  runs: RunOutcome<number>[];
  target?: { op: '≥' | '≤'; value: number };
}

function summarize(m: Metric): { median: number | null; min: number; max: number; failed: number; otherPct: number | undefined } {
  const okRuns = m.runs.filter((r): r is Extract<RunOutcome<number>, { ok: true }> => r.ok);
  const ok = okRuns.map((r) => r.value);
  const failed = m.runs.length - ok.length;
  const { min, max } = minMax(ok);
  const others = okRuns.map((r) => r.cpu?.otherPct).filter((x): x is number => x !== undefined);
  return { median: failed === 0 && ok.length > 0 ? median(ok) : null, min, max, failed, otherPct: others.length > 0 ? median(others) : undefined };
}

function verdict(m: Metric, med: number | null): string {
  if (m.runs.length === 0) return 'not run';
  if (med === null) return 'FAILED';
  if (!m.target) return '';
  const met = m.target.op === '≥' ? med >= m.target.value : med <= m.target.value;
  return met ? 'met' : 'MISSED';
}

async function serverDescription(): Promise<string> {
  try {
    return await withAdmin(async (c) => {
      const [rows] = await c.query<RowDataPacket[]>(
        "SELECT VERSION() AS v, @@innodb_flush_log_at_trx_commit AS f, @@innodb_buffer_pool_size AS bp, @@log_bin AS lb",
      );
      const r = rows[0];
      if (!r) return 'unknown server';
      return `${String(r.v)} (innodb_flush_log_at_trx_commit=${String(r.f)}, buffer pool ${Math.round(Number(r.bp) / 2 ** 20)} MiB, log_bin=${String(r.lb)})`;
    });
  } catch (error) {
    return `unreachable: ${error instanceof Error ? error.message : String(error)}`;
  }
}

async function main(): Promise<number> {
  const opts = parseOptions();
  const sz = sizes(opts.scale);
  const server = await serverDescription();
  const revision = codeRevision();
  progress(`lanewake ledger benchmark — code ${revision} — ${benchServerUrl()} — ${server}`);
  progress(
    `runs ${opts.runs}, scale ${opts.scale}: enqueue ${fmt(sz.enqueueItems)}, claim+complete ${fmt(sz.claimItems)} with ${opts.claimers} claimers, ` +
      `latency ${fmt(sz.latencySamples)} claims over ${fmt(sz.latencyHeads)} heads, deep lane ${fmt(sz.deepLaneItems)}`,
  );
  const started = nowMs();

  const m = {
    enqueueOwn: { label: `enqueue, own lanes (batches of ${ENQUEUE_BATCH})`, unit: 'items/s', digits: 0, runs: [] } as Metric,
    enqueueShared: { label: `enqueue, ${fmt(SHARED_LANES)} shared lanes (batches of ${ENQUEUE_BATCH})`, unit: 'items/s', digits: 0, runs: [] } as Metric,
    enqueueDeep: { label: `enqueue, one lane (batches of ${fmt(DEEP_LANE_BATCH)}; deep-lane setup)`, unit: 'items/s', digits: 0, runs: [] } as Metric,
    ccOwn: {
      label: `claim+complete, own lanes (${opts.claimers} claimers × limit ${CLAIM_LIMIT})`,
      unit: 'items/s',
      digits: 0,
      runs: [],
      target: { op: '≥', value: TARGETS.claimCompleteOwn },
    } as Metric,
    ccShared: {
      label: `claim+complete, ${fmt(SHARED_LANES)} shared lanes`,
      unit: 'items/s',
      digits: 0,
      runs: [],
      target: { op: '≥', value: TARGETS.claimCompleteShared },
    } as Metric,
    p50: { label: 'claim(limit 1) p50, no deep lane', unit: 'ms', digits: 2, runs: [] } as Metric,
    p99: { label: 'claim(limit 1) p99, no deep lane', unit: 'ms', digits: 2, runs: [] } as Metric,
    deepP50: { label: `claim(limit 1) p50, with a ${fmt(sz.deepLaneItems)}-item lane`, unit: 'ms', digits: 2, runs: [] } as Metric,
    deepP99: { label: `claim(limit 1) p99, with a ${fmt(sz.deepLaneItems)}-item lane`, unit: 'ms', digits: 2, runs: [] } as Metric,
    completeShort: { label: `complete() of a lane head, short lane (p50 of ${COMPLETE_PROBES}; info)`, unit: 'ms', digits: 2, runs: [] } as Metric,
    completeDeep: { label: `complete() of the deep lane's head (p50 of ${COMPLETE_PROBES}; info)`, unit: 'ms', digits: 2, runs: [] } as Metric,
    ratio: {
      label: 'deep-lane claim ratio (p50 with / without)',
      unit: '×',
      digits: 2,
      runs: [],
      target: { op: '≤', value: TARGETS.deepLaneRatio },
    } as Metric,
  };
  const details: string[][] = [];
  const record = (run: number, what: string, metric: Metric, outcome: RunOutcome<number>, detail = true): void => {
    metric.runs.push(outcome);
    if (!detail) return;
    const cpu = outcome.ok && outcome.cpu ? outcome.cpu : undefined;
    details.push([
      String(run),
      what,
      outcome.ok ? fmt(outcome.value, metric.digits) : 'FAILED',
      cpu ? fmt(cpu.nodePct) : '',
      cpu ? fmt(cpu.serverPct) : '',
      cpu ? fmt(cpu.otherPct) : '',
      outcome.ok ? outcome.note : outcome.error,
    ]);
    progress(`  run ${run} ${what}: ${outcome.ok ? `${fmt(outcome.value, metric.digits)} ${metric.unit} — ${outcome.note}` : outcome.error}`);
  };

  for (let run = 1; run <= opts.runs; run++) {
    progress(`run ${run}/${opts.runs} (${((nowMs() - started) / 1000).toFixed(0)} s elapsed)`);
    if (opts.only.has('enqueue')) {
      record(run, 'enqueue own', m.enqueueOwn, await attempt(() => benchEnqueue(sz.enqueueItems, null)));
      record(run, 'enqueue shared', m.enqueueShared, await attempt(() => benchEnqueue(sz.enqueueItems, SHARED_LANES)));
    }
    if (opts.only.has('own')) {
      record(run, 'claim+complete own', m.ccOwn, await attempt(() => benchClaimComplete(sz.claimItems, null, opts.claimers)));
    }
    if (opts.only.has('shared')) {
      record(run, 'claim+complete shared', m.ccShared, await attempt(() => benchClaimComplete(sz.claimItems, SHARED_LANES, opts.claimers)));
    }
    if (opts.only.has('latency')) {
      const lat = await attempt(() => benchLatency(sz));
      const part = (f: (v: LatencyRun) => number): RunOutcome<number> =>
        lat.ok ? { ok: true, value: f(lat.value), note: lat.note, ...(lat.cpu ? { cpu: lat.cpu } : {}) } : { ok: false, error: lat.error };
      record(run, 'enqueue deep lane', m.enqueueDeep, part((v) => v.deepEnqueueItemsS), false);
      record(run, 'claim p50', m.p50, part((v) => v.p50), false);
      record(run, 'claim p99', m.p99, part((v) => v.p99), false);
      record(run, 'claim p50 deep', m.deepP50, part((v) => v.deepP50), false);
      record(run, 'claim p99 deep', m.deepP99, part((v) => v.deepP99), false);
      record(run, 'complete short lane head', m.completeShort, part((v) => v.completeLaneHeadP50), false);
      record(run, 'complete deep lane head', m.completeDeep, part((v) => v.completeDeepHeadP50), false);
      const ratio = part((v) => v.ratio);
      if (lat.ok && ratio.ok) {
        const v = lat.value;
        ratio.note = `p50/p99 ${fmt(v.p50, 2)}/${fmt(v.p99, 2)} ms without, ${fmt(v.deepP50, 2)}/${fmt(v.deepP99, 2)} ms with the deep lane; ${lat.note}; complete() of a lane head ${fmt(v.completeLaneHeadP50, 1)} ms short / ${fmt(v.completeDeepHeadP50, 1)} ms deep`;
      }
      record(run, 'deep-lane claim ratio', m.ratio, ratio);
    }
  }
  const elapsedS = (nowMs() - started) / 1000;

  const order: Metric[] = [m.enqueueOwn, m.enqueueShared, m.enqueueDeep, m.ccOwn, m.ccShared, m.p50, m.p99, m.deepP50, m.deepP99, m.ratio, m.completeShort, m.completeDeep];
  const summary = new Map<Metric, ReturnType<typeof summarize>>(order.map((x) => [x, summarize(x)]));
  printTable(
    `lanewake ledger benchmark — code ${revision} — median of ${opts.runs} run(s), scale ${opts.scale}, ${elapsedS.toFixed(0)} s — ${server}`,
    ['measurement', 'median', 'min–max', 'unit', 'target', 'verdict', 'noise'],
    order
      .filter((x) => x.runs.length > 0)
      .map((x) => {
        const s = summary.get(x)!;
        return [
          x.label,
          fmt(s.median, x.digits),
          s.failed === x.runs.length ? '—' : `${fmt(s.min, x.digits)}–${fmt(s.max, x.digits)}`,
          x.unit,
          x.target ? `${x.target.op} ${fmt(x.target.value, x.unit === '×' ? 1 : 0)}` : '',
          verdict(x, s.median) + (s.failed > 0 ? ` (${s.failed} failed run${s.failed > 1 ? 's' : ''})` : ''),
          s.otherPct === undefined ? '' : `${fmt(s.otherPct)}%`,
        ];
      }),
    ['left', 'right', 'right', 'left', 'left', 'left', 'right'],
  );
  printTable(
    `per run (CPU as % of one core over the timed part; ${availableParallelism()} cores, so ${availableParallelism() * 100}% is all of it; ` +
      `"other %" is what the rest of the machine used meanwhile: noise)`,
    ['run', 'measurement', 'value', 'node %', 'db %', 'other %', 'notes'],
    details,
    ['right', 'left', 'right', 'right', 'right', 'right', 'left'],
  );

  const med = (x: Metric): number | null => {
    const v = summary.get(x)?.median;
    return v === undefined || v === null ? null : Number(v.toFixed(x.digits === 0 ? 0 : 3));
  };
  const result = {
    enqueue_items_s: med(m.enqueueOwn),
    claim_complete_items_s: med(m.ccOwn),
    claim_complete_shared_lanes_items_s: med(m.ccShared),
    claim_p50_ms: med(m.p50),
    claim_p99_ms: med(m.p99),
    deep_lane_claim_ratio: med(m.ratio),
  };
  const here = dirname(fileURLToPath(import.meta.url));
  const resultsDir = join(here, 'results');
  mkdirSync(resultsDir, { recursive: true });
  const meta = {
    at: new Date().toISOString(),
    code: revision,
    runs: opts.runs,
    scale: opts.scale,
    claimers: opts.claimers,
    only: [...opts.only],
    server,
    node: process.version,
    elapsed_s: Number(elapsedS.toFixed(1)),
    shared_lanes_enqueue_items_s: med(m.enqueueShared),
    deep_lane_enqueue_items_s: med(m.enqueueDeep),
    claim_p50_deep_lane_ms: med(m.deepP50),
    claim_p99_deep_lane_ms: med(m.deepP99),
    complete_short_lane_head_p50_ms: med(m.completeShort),
    complete_deep_lane_head_p50_ms: med(m.completeDeep),
  };
  writeFileSync(join(resultsDir, 'ledger-latest.json'), `${JSON.stringify({ ...result, meta }, null, 2)}\n`);

  console.log(
    '\nnoise: median CPU the rest of the machine used during the timed runs, in % of one core ' +
      `(of ${availableParallelism() * 100}%); well above ~20% the throughput figures understate the code. ` +
      'CPU/item in the per-run notes is steadier than items/s.',
  );

  const anyFailed = order.some((x) => (summary.get(x)?.failed ?? 0) > 0);
  if (opts.json) console.log(JSON.stringify(result));
  return anyFailed ? 1 : 0;
}

main()
  .then(async (code) => {
    await runCleanups();
    process.exitCode = code;
  })
  .catch(async (error: unknown) => {
    // After SIGINT the killed sessions' errors are expected; the handler is already cleaning up.
    if (!isInterrupted()) console.error(error instanceof Error ? (error.stack ?? error.message) : error);
    await runCleanups();
    process.exitCode = isInterrupted() ? 130 : 1;
  });
