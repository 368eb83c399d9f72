/**
 * What the ledger benchmark's runs are made of (bench/ledger.ts): its sizes
 * at a scale, the items it enqueues, a fresh migrated ledger per run, and how
 * a run's outcome is recorded.
 */
import { sql, type RawBuilder } from 'kysely';
import { Ledger, type EnqueueInput } from '../src/index.js';
import { createBenchDatabase, fmt, isInterrupted, type CpuShare } from './support.js';

export const QUEUE = 'bench';
export const TYPE = 'noop';
export const SHARED_LANES = 1_000;
export const ENQUEUE_BATCH = 500;
export const DEEP_LANE_BATCH = 1_000;
export const CLAIM_LIMIT = 32;
export const LEASE_MS = 30_000;
export const LATENCY_WARMUP = 20;

export interface Sizes {
  enqueueItems: number;
  claimItems: number;
  latencyHeads: number;
  latencySamples: number;
  deepLaneItems: number;
}

export function sizes(scale: number): Sizes {
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
export function payload(i: number): { n: number; entity: string; op: string } {
  return { n: i, entity: `acct_${(i * 2_654_435_761) % 1_000_003}`.padEnd(40, '0'), op: 'sync' };
}

export function ownLaneInputs(count: number, offset = 0): EnqueueInput[] {
  return Array.from({ length: count }, (_, i) => ({ queue: QUEUE, type: TYPE, payload: payload(offset + i) }));
}

function laneName(k: number): string {
  return `lane-${String(k).padStart(4, '0')}`;
}

export function sharedLaneInputs(count: number, lanes: number): EnqueueInput[] {
  return Array.from({ length: count }, (_, i) => ({
    queue: QUEUE,
    type: TYPE,
    payload: payload(i),
    lane: laneName(i % lanes),
  }));
}

export async function enqueueInBatches(ledger: Ledger, inputs: readonly EnqueueInput[], batch: number): Promise<void> {
  for (let i = 0; i < inputs.length; i += batch) {
    if (isInterrupted()) throw new Error('interrupted');
    await ledger.enqueueMany(inputs.slice(i, i + batch));
  }
}

/** A fresh database with a migrated ledger; everything is closed and dropped when `fn` ends, however it ends. */
export async function withFreshLedger<T>(
  fn: (ctx: { url: string; ledger: Ledger; open: (poolSize: number) => Ledger }) => Promise<T>,
): Promise<T> {
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

export async function countWhere(ledger: Ledger, where: RawBuilder<unknown>): Promise<number> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items} WHERE ${where}`.execute(
    ledger.db,
  );
  return Number(r.rows[0]?.n ?? 0);
}

// ---------------------------------------------------------------------------
// Results.

export type RunOutcome<T> = { ok: true; value: T; note: string; cpu?: CpuShare } | { ok: false; error: string };

export async function attempt<T>(
  fn: () => Promise<{ value: T; note: string; cpu?: CpuShare }>,
): Promise<RunOutcome<T>> {
  try {
    const r = await fn();
    return { ok: true, ...r };
  } catch (error) {
    if (isInterrupted()) throw error;
    return { ok: false, error: error instanceof Error ? error.message : String(error) };
  }
}

export class VerificationFailed extends Error {}

/** CPU time per item, node and server: steadier than items/s on a noisy machine. */
export function cpuPerItem(cpu: CpuShare, items: number, wallMs: number): string {
  const us = (pct: number | undefined): string =>
    pct === undefined ? '—' : fmt(((pct / 100) * wallMs * 1000) / items);
  return `CPU/item node ${us(cpu.nodePct)} µs, db ${us(cpu.serverPct)} µs`;
}
