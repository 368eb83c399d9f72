/**
 * bench/cost.ts's figures per job: each phase's totals divided by its jobs,
 * the sums of the parts beside the whole engine, medians over the runs, and
 * the plain-text tables.
 */
import type { EngineCounts, PhaseCost, PhaseKey, Variant } from './cost-lanewake.js';
import type { PeerCost } from './cost-graphile.js';
import type { ServerFamily } from './cost-meter.js';
import { fmt, formatTable, median, type Align } from './support.js';

/** One phase of one run, per job (wallMs and foreignStatements are totals). */
export interface PerJob {
  jobs: number;
  wallMs: number;
  jobsPerS: number;
  serverCpuUs: number | undefined;
  /** The part of it that served this run's own connections (cost-meter.ts). */
  serverCpuOwnUs: number | undefined;
  workerCpuUs: number;
  roundTrips: number;
  statements: number;
  /** MariaDB/MySQL: Handler_read_*; TiDB: keys scanned (statements_summary TOTAL_KEYS). */
  rowsRead: number | undefined;
  /** MariaDB/MySQL: Handler_write + _update + _delete; TiDB: affected rows. */
  rowsWritten: number | undefined;
  /** Every server counter of the phase, per job. */
  counters: Record<string, number>;
  /** MariaDB/MySQL: statements the server ran (Questions) beyond ours, in total: other clients of the server. */
  foreignStatements: number | undefined;
}

export interface RunCosts {
  lanewake: Partial<Record<Variant, Partial<Record<PhaseKey, PhaseCost>>>>;
  engineCounts: Partial<Record<Variant, EngineCounts>>;
  peer: PeerCost | undefined;
}

export interface ReportRow {
  variant: Variant;
  /** A phase, or a sum of phases ('parts', 'partsAffinity', 'engine'). */
  key: PhaseKey | SumKey;
  label: string;
  median: PerJob;
  runs: PerJob[];
}

export interface PeerRow {
  system: string;
  server: string;
  enqueue: PerJob;
  process: PerJob;
  total: PerJob;
}

type SumKey = 'parts' | 'partsAffinity' | 'engine';

const SUMS: Record<SumKey, readonly PhaseKey[]> = {
  parts: ['enqueueBatch', 'claim', 'complete'],
  partsAffinity: ['enqueueBatch', 'affinityClaim', 'affinityComplete'],
  engine: ['engineEnqueue', 'engineDrain'],
};

const READS = [
  'Handler_read_first',
  'Handler_read_key',
  'Handler_read_last',
  'Handler_read_next',
  'Handler_read_prev',
  'Handler_read_rnd',
  'Handler_read_rnd_next',
];
const WRITES = ['Handler_write', 'Handler_update', 'Handler_delete'];

export function perJob(cost: PhaseCost, family: ServerFamily | 'postgresql'): PerJob {
  const n = Math.max(1, cost.jobs);
  const c = cost.counters;
  const counters = Object.fromEntries(Object.entries(c ?? {}).map(([k, v]) => [k, v / n]));
  const sumOf = (names: readonly string[]): number | undefined =>
    c === undefined ? undefined : names.reduce((t, k) => t + (c[k] ?? 0), 0) / n;
  const tidb = family === 'tidb';
  return {
    jobs: cost.jobs,
    wallMs: cost.wallMs,
    jobsPerS: cost.wallMs > 0 ? (cost.jobs / cost.wallMs) * 1000 : Number.NaN,
    serverCpuUs: cost.serverCpuUs === undefined ? undefined : cost.serverCpuUs / n,
    serverCpuOwnUs: cost.serverCpuOwnUs === undefined ? undefined : cost.serverCpuOwnUs / n,
    workerCpuUs: cost.workerCpuUs / n,
    roundTrips: cost.roundTrips / n,
    statements: cost.statements / n,
    rowsRead: tidb ? sumOf(['TOTAL_KEYS']) : sumOf(READS),
    rowsWritten: tidb ? sumOf(['AFFECTED_ROWS']) : sumOf(WRITES),
    counters,
    foreignStatements: c?.Questions === undefined ? undefined : c.Questions - cost.statements,
  };
}

function plus(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined || b === undefined ? undefined : a + b;
}

/** Phases over the same jobs, one after the other: per-job figures add up. */
export function sumPerJob(parts: readonly PerJob[]): PerJob | undefined {
  const [first, ...rest] = parts;
  if (first === undefined) return undefined;
  let s: PerJob = { ...first, counters: { ...first.counters } };
  for (const p of rest) {
    const counters = { ...s.counters };
    for (const [k, v] of Object.entries(p.counters)) counters[k] = (counters[k] ?? 0) + v;
    s = {
      jobs: s.jobs,
      wallMs: s.wallMs + p.wallMs,
      jobsPerS: Number.NaN,
      serverCpuUs: plus(s.serverCpuUs, p.serverCpuUs),
      serverCpuOwnUs: plus(s.serverCpuOwnUs, p.serverCpuOwnUs),
      workerCpuUs: s.workerCpuUs + p.workerCpuUs,
      roundTrips: s.roundTrips + p.roundTrips,
      statements: s.statements + p.statements,
      rowsRead: plus(s.rowsRead, p.rowsRead),
      rowsWritten: plus(s.rowsWritten, p.rowsWritten),
      counters,
      foreignStatements: plus(s.foreignStatements, p.foreignStatements),
    };
  }
  return { ...s, jobsPerS: s.wallMs > 0 ? (s.jobs / s.wallMs) * 1000 : Number.NaN };
}

function medianOrUndefined(values: readonly (number | undefined)[]): number | undefined {
  const known = values.filter((v): v is number => v !== undefined && Number.isFinite(v));
  return known.length === 0 ? undefined : median(known);
}

/** Each figure's median over the runs (figures are taken apart: the median run of one need not be that of another). */
export function medianPerJob(runs: readonly PerJob[]): PerJob {
  const m = (pick: (p: PerJob) => number | undefined): number | undefined => medianOrUndefined(runs.map(pick));
  const names = new Set(runs.flatMap((r) => Object.keys(r.counters)));
  return {
    jobs: m((p) => p.jobs) ?? 0,
    wallMs: m((p) => p.wallMs) ?? Number.NaN,
    jobsPerS: m((p) => p.jobsPerS) ?? Number.NaN,
    serverCpuUs: m((p) => p.serverCpuUs),
    serverCpuOwnUs: m((p) => p.serverCpuOwnUs),
    workerCpuUs: m((p) => p.workerCpuUs) ?? Number.NaN,
    roundTrips: m((p) => p.roundTrips) ?? Number.NaN,
    statements: m((p) => p.statements) ?? Number.NaN,
    rowsRead: m((p) => p.rowsRead),
    rowsWritten: m((p) => p.rowsWritten),
    counters: Object.fromEntries([...names].map((k) => [k, m((p) => p.counters[k]) ?? Number.NaN])),
    foreignStatements: m((p) => p.foreignStatements),
  };
}

export interface Labels {
  claimRound: number;
  concurrency: number;
}

function label(key: PhaseKey | SumKey, variant: Variant, l: Labels): string {
  const batch = variant === 'laned' ? 128 : 500;
  const labels: Record<PhaseKey | SumKey, string> = {
    enqueueBatch: 'enqueue: enqueueMany × 500',
    enqueueSingle: 'enqueue: one enqueue per item',
    claim: `claim: rounds of ≤ ${l.claimRound}`,
    complete: `complete: completeMany × ${batch}`,
    affinityClaim: 'affinity: claim the first heads',
    affinityComplete: 'affinity: complete × 128, claiming successors',
    engineEnqueue: 'engine: producer enqueueMany × 500',
    engineDrain: `engine: consumer drains (concurrency ${l.concurrency})`,
    parts: '= parts: enqueue × 500 + claim + complete',
    partsAffinity: '= parts with lane affinity',
    engine: '= engine: enqueue + drain',
  };
  return labels[key];
}

const ORDER: readonly (PhaseKey | SumKey)[] = [
  'enqueueBatch',
  'enqueueSingle',
  'claim',
  'complete',
  'parts',
  'affinityClaim',
  'affinityComplete',
  'partsAffinity',
  'engineEnqueue',
  'engineDrain',
  'engine',
];

export function reportRows(runs: readonly RunCosts[], family: ServerFamily, l: Labels): ReportRow[] {
  const rows: ReportRow[] = [];
  for (const variant of ['laneless', 'laned'] as const) {
    for (const key of ORDER) {
      const perRun: PerJob[] = [];
      for (const run of runs) {
        const phases = run.lanewake[variant];
        if (phases === undefined) continue;
        const p =
          key in SUMS
            ? sumPerJob(SUMS[key as SumKey].flatMap((k) => phaseOf(phases, k, family)))
            : phaseOf(phases, key as PhaseKey, family)[0];
        const complete = !(key in SUMS) || SUMS[key as SumKey].every((k) => phases[k] !== undefined);
        if (p !== undefined && complete) perRun.push(p);
      }
      if (perRun.length > 0)
        rows.push({ variant, key, label: label(key, variant, l), median: medianPerJob(perRun), runs: perRun });
    }
  }
  return rows;
}

function phaseOf(phases: Partial<Record<PhaseKey, PhaseCost>>, key: PhaseKey, family: ServerFamily): PerJob[] {
  const cost = phases[key];
  return cost === undefined ? [] : [perJob(cost, family)];
}

/** lanewake's engine and parts (laneless) beside the peer: enqueue, the rest, and the total, medians over runs. */
export function peerRows(runs: readonly RunCosts[], family: ServerFamily, serverName: string): PeerRow[] {
  const out: PeerRow[] = [];
  const row = (
    system: string,
    server: string,
    split: (run: RunCosts) => { enqueue: PerJob[]; process: PerJob[] } | undefined,
  ): void => {
    const enqueue: PerJob[] = [];
    const process: PerJob[] = [];
    const total: PerJob[] = [];
    for (const run of runs) {
      const s = split(run);
      const e = s && sumPerJob(s.enqueue);
      const p = s && sumPerJob(s.process);
      if (e === undefined || p === undefined) continue;
      enqueue.push(e);
      process.push(p);
      total.push(sumPerJob([e, p])!);
    }
    if (total.length > 0)
      out.push({
        system,
        server,
        enqueue: medianPerJob(enqueue),
        process: medianPerJob(process),
        total: medianPerJob(total),
      });
  };
  const lanewake = (enqueueKey: PhaseKey, processKeys: readonly PhaseKey[]) => (run: RunCosts) => {
    const phases = run.lanewake.laneless;
    if (phases === undefined || phases[enqueueKey] === undefined || processKeys.some((k) => phases[k] === undefined))
      return undefined;
    return {
      enqueue: phaseOf(phases, enqueueKey, family),
      process: processKeys.flatMap((k) => phaseOf(phases, k, family)),
    };
  };
  row('lanewake engine (laneless)', serverName, lanewake('engineEnqueue', ['engineDrain']));
  row('lanewake ledger calls (laneless)', serverName, lanewake('enqueueBatch', ['claim', 'complete']));
  const peer = runs.find((r) => r.peer !== undefined)?.peer;
  if (peer !== undefined) {
    row(`${peer.system} (${peer.mode})`, peer.server, (run) =>
      run.peer === undefined
        ? undefined
        : { enqueue: [perJob(run.peer.enqueue, 'postgresql')], process: [perJob(run.peer.process, 'postgresql')] },
    );
  }
  return out;
}

// ---------------------------------------------------------------------------
// Tables.

/** Enough digits to read a per-job figure: 0.004 round trips, 12.3 µs, 1,234 µs. */
export function num(v: number | undefined): string {
  if (v === undefined || !Number.isFinite(v)) return '—';
  const a = Math.abs(v);
  return fmt(v, a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : a === 0 ? 0 : 3);
}

function ratio(a: number | undefined, b: number | undefined): string {
  return a === undefined || b === undefined || b === 0 ? '—' : `${(a / b).toFixed(2)}×`;
}

export function mainTable(rows: readonly ReportRow[]): string {
  const headers = [
    'variant',
    'phase',
    'server CPU µs',
    'its sessions',
    'worker CPU µs',
    'round trips',
    'statements',
    'rows read',
    'rows written',
    'jobs/s',
  ];
  const align: Align[] = ['left', 'left', ...Array<Align>(8).fill('right')];
  const body = rows.map((r) => {
    const m = r.median;
    return [
      r.variant,
      r.label,
      num(m.serverCpuUs),
      num(m.serverCpuOwnUs),
      num(m.workerCpuUs),
      num(m.roundTrips),
      num(m.statements),
      num(m.rowsRead),
      num(m.rowsWritten),
      fmt(m.jobsPerS),
    ];
  });
  return formatTable(headers, body, align);
}

const MARIADB_DETAIL: readonly [string, string][] = [
  ['read_key', 'Handler_read_key'],
  ['read_next', 'Handler_read_next'],
  ['read_rnd_next', 'Handler_read_rnd_next'],
  ['write', 'Handler_write'],
  ['update', 'Handler_update'],
  ['delete', 'Handler_delete'],
  ['commit', 'Handler_commit'],
  ['Innodb rows read', 'Innodb_rows_read'],
  ['Innodb ins/upd/del', ''],
  ['Rows_read', 'Rows_read'],
];

const TIDB_DETAIL: readonly [string, string][] = [
  ['statements run', 'STATEMENTS'],
  ['keys scanned', 'TOTAL_KEYS'],
  ['keys processed', 'PROCESSED_KEYS'],
  ['rows affected', 'AFFECTED_ROWS'],
  ['rows returned', 'RESULT_ROWS'],
  ['keys written', 'WRITE_KEYS'],
  ['statement time µs', 'LATENCY_NS'],
];

/** The server's own counters per job (phases only, not the sums). */
export function detailTable(rows: readonly ReportRow[], family: ServerFamily): string {
  const phases = rows.filter((r) => !(r.key in SUMS));
  const columns = family === 'tidb' ? TIDB_DETAIL : MARIADB_DETAIL;
  const headers = [
    'variant',
    'phase',
    ...columns.map(([h]) => h),
    ...(family === 'tidb' ? [] : ["others' statements"]),
  ];
  const body = phases.map((r) => {
    const c = r.median.counters;
    const cells = columns.map(([, name]) => {
      if (name === '') {
        const parts = ['Innodb_rows_inserted', 'Innodb_rows_updated', 'Innodb_rows_deleted'].map((k) => c[k]);
        return parts.every((v) => v === undefined) ? '—' : parts.map(num).join('/');
      }
      const v = c[name];
      return name === 'LATENCY_NS' && v !== undefined ? num(v / 1000) : num(v);
    });
    return [r.variant, r.label, ...cells, ...(family === 'tidb' ? [] : [num(r.median.foreignStatements)])];
  });
  return formatTable(headers, body, ['left', 'left', ...Array<Align>(headers.length - 2).fill('right')]);
}

/** The engine end to end beside the sum of its parts, per variant. */
export function sumCheckTable(rows: readonly ReportRow[]): string {
  const headers = ['variant', 'per job', 'parts', 'parts, affinity', 'engine', 'engine ÷ parts'];
  const body: string[][] = [];
  for (const variant of ['laneless', 'laned'] as const) {
    const find = (key: SumKey): PerJob | undefined => rows.find((r) => r.variant === variant && r.key === key)?.median;
    const parts = find('parts');
    const affinity = find('partsAffinity');
    const engine = find('engine');
    if (parts === undefined || engine === undefined) continue;
    const measures: [string, (p: PerJob) => number | undefined][] = [
      ['server CPU µs', (p) => p.serverCpuUs],
      ['  its sessions', (p) => p.serverCpuOwnUs],
      ['worker CPU µs', (p) => p.workerCpuUs],
      ['round trips', (p) => p.roundTrips],
      ['statements', (p) => p.statements],
      ['rows read', (p) => p.rowsRead],
      ['rows written', (p) => p.rowsWritten],
    ];
    for (const [name, pick] of measures) {
      const nearest = variant === 'laned' && affinity !== undefined ? pick(affinity) : pick(parts);
      body.push([
        variant,
        name,
        num(pick(parts)),
        affinity === undefined ? '—' : num(pick(affinity)),
        num(pick(engine)),
        ratio(pick(engine), nearest),
      ]);
    }
  }
  return formatTable(headers, body, ['left', 'left', 'right', 'right', 'right', 'right']);
}

export function peerTable(rows: readonly PeerRow[]): string {
  const headers = [
    'system',
    'server',
    'server CPU µs: enqueue',
    'process',
    'total',
    'its sessions: enqueue',
    'process',
    'total',
    'worker CPU µs total',
    'round trips total',
    'process jobs/s',
  ];
  const body = rows.map((r) => [
    r.system,
    r.server,
    num(r.enqueue.serverCpuUs),
    num(r.process.serverCpuUs),
    num(r.total.serverCpuUs),
    num(r.enqueue.serverCpuOwnUs),
    num(r.process.serverCpuOwnUs),
    num(r.total.serverCpuOwnUs),
    num(r.total.workerCpuUs),
    num(r.total.roundTrips),
    fmt(r.process.jobsPerS),
  ]);
  return formatTable(headers, body, ['left', 'left', ...Array<Align>(9).fill('right')]);
}

export function engineCountsLine(runs: readonly RunCosts[]): string[] {
  const lines: string[] = [];
  for (const variant of ['laneless', 'laned'] as const) {
    const counts = runs.map((r) => r.engineCounts[variant]).filter((c): c is EngineCounts => c !== undefined);
    if (counts.length === 0) continue;
    const m = (pick: (c: EngineCounts) => number): string => fmt(median(counts.map(pick)));
    lines.push(
      `engine, ${variant}: ${m((c) => c.claimRounds)} claim rounds of median ` +
        `${m((c) => c.medianRoundSize)} items; ${m((c) => c.claimedWithCompletion)} ` +
        `items claimed with their predecessor's completion`,
    );
  }
  return lines;
}
