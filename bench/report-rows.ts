/**
 * What one invocation of bench/compare.ts recorded (CompareResults, saved
 * as bench/results/compare-<time>.json), and the table rows made from it:
 * median and min–max per (metric, system, mode) over the runs that passed
 * their effect check, how many failed, and the ratio to the reference.
 * Pure: results in, rows out.
 */
import type { ServerDurability } from './machine.js';
import { METRICS, rowName, type Better, type RunResult, type Sizes } from './peers/protocol.js';
import { HEADLINE_ROW } from './peers/registry.js';
import type { Workload } from './peers/types.js';
import { fmt, median, minMax } from './support.js';

export interface FactoryInfo {
  system: string;
  mode: string;
  workloads: readonly Workload[];
  notes: Partial<Record<Workload, string>>;
  ordersByKey: boolean;
}

export interface NotApplicable {
  workload: Workload;
  system: string;
  mode: string;
  note: string;
}

export interface Failure {
  workload: Workload;
  system: string;
  mode: string;
  run: number;
  reason: string;
}

export const COMPARE_FORMAT = 'lanewake-compare/2';

/** Everything one invocation of bench/compare.ts measured (bench/results/compare-*.json). */
export interface CompareResults {
  format: typeof COMPARE_FORMAT;
  startedAt: string;
  finishedAt: string;
  command: string;
  machine: string;
  /** Server and library versions, e.g. { MariaDB: '10.11.6', bullmq: '5.1.0' }. */
  software: Record<string, string>;
  /** How durable each server's commits were (bench/machine.ts). */
  durability: ServerDurability[];
  /** `git rev-parse --short HEAD`, `+dirty` when src/ or bench/ differ from it. */
  revision: string;
  params: { runs: number; scale: number; systems: string[] | null; workloads: Workload[] };
  /** Every system and workload, scale 1, enough runs: the only kind that may be published. */
  full: boolean;
  sizes: Sizes;
  reference: { system: string; mode: string };
  factories: FactoryInfo[];
  notApplicable: NotApplicable[];
  results: RunResult[];
  failures: Failure[];
  /** Derived from `results` by `summarize` (kept for readers of the JSON). */
  rows: Row[];
}

export interface Ratio {
  /** > 1: the reference is better by this factor. */
  value: number;
  label: string;
}

export interface Row {
  workload: Workload;
  metric: string;
  /** "latency p50": the row's name in tables and latest.json. */
  name: string;
  system: string;
  mode: string;
  unit: string;
  better: Better;
  rss: boolean;
  /** Values of the runs that passed their effect check. */
  values: number[];
  /** null: every run failed. */
  median: number | null;
  min: number | null;
  max: number | null;
  runs: number;
  failedRuns: number;
  ratio: Ratio | null;
}

export const same = (a: { system: string; mode: string }, b: { system: string; mode: string }): boolean =>
  a.system === b.system && a.mode === b.mode;

function ratioText(v: number): string {
  if (v >= 100) return fmt(v, 0);
  if (v >= 10) return fmt(v, 1);
  return fmt(v, 2);
}

function ratioOf(ref: number | null, peer: number | null, better: Better, unit: string): Ratio | null {
  if (ref === null || peer === null || better === 'none' || !(ref > 0) || !(peer > 0)) return null;
  const value = better === 'higher' ? ref / peer : peer / ref;
  const x = `${ratioText(value)}×`;
  // Behind: say by how much in the natural direction (2.5× slower), not as a fraction.
  const inv = `${ratioText(1 / value)}×`;
  if (unit === 'MB') return { value, label: value >= 1 ? `${x} less RSS` : `${inv} more RSS` };
  if (unit === 'ms') return { value, label: value >= 1 ? `${x} faster` : `${inv} slower` };
  return { value, label: value >= 1 ? x : `${x} (behind)` };
}

/** Rows (median, min–max, failed runs, ratio to the reference) from the raw run results, in table order. */
export function summarize(r: Pick<CompareResults, 'results' | 'factories' | 'reference' | 'params'>): Row[] {
  const rows: Row[] = [];
  for (const m of METRICS) {
    if (!r.params.workloads.includes(m.workload)) continue;
    for (const f of r.factories) {
      const runs = r.results.filter((x) => x.workload === m.workload && same(x, f));
      if (runs.length === 0) continue;
      const passed = runs.filter((x) => x.ok);
      const values = passed
        .map((x) => x.values[m.metric])
        .filter((v): v is number => v !== undefined && Number.isFinite(v));
      const { min, max } = minMax(values);
      rows.push({
        workload: m.workload,
        metric: m.metric,
        name: rowName(m),
        system: f.system,
        mode: f.mode,
        unit: m.unit,
        better: m.better,
        rss: m.rss === true,
        values,
        median: values.length > 0 ? median(values) : null,
        min: values.length > 0 ? min : null,
        max: values.length > 0 ? max : null,
        runs: runs.length,
        failedRuns: runs.length - passed.length,
        ratio: null,
      });
    }
  }
  for (const row of rows) {
    if (same(row, r.reference)) continue;
    const ref = rows.find((x) => x.name === row.name && same(x, r.reference));
    if (ref) row.ratio = ratioOf(ref.median, row.median, row.better, row.unit);
  }
  return rows;
}

/** The reference's two-process latency p50: the one latency figure quoted for lanewake. */
export function headlineRow(r: Pick<CompareResults, 'rows' | 'reference'>): Row | undefined {
  return r.rows.find((x) => x.name === HEADLINE_ROW && same(x, r.reference));
}

export function formatValue(v: number | null, unit: string): string {
  if (v === null || !Number.isFinite(v)) return '—';
  if (unit === 'ms') return fmt(v, v >= 100 ? 0 : 2);
  if (unit === 'ratio') return fmt(v, 2);
  return fmt(v, 0);
}

export function rangeText(row: Row): string {
  if (row.min === null || row.max === null) return '—';
  return `${formatValue(row.min, row.unit)}–${formatValue(row.max, row.unit)}`;
}

export function medianText(row: Row): string {
  if (row.median === null) return `FAILED (${row.failedRuns}/${row.runs} runs)`;
  return formatValue(row.median, row.unit);
}

/** "0/3", or "2/3 FAILED" when some failed. */
export function failedText(row: Row): string {
  return row.failedRuns > 0 ? `${row.failedRuns}/${row.runs} failed` : `0/${row.runs}`;
}

export function ratioCell(row: Row, reference: { system: string; mode: string }): string {
  if (same(row, reference)) return row.better === 'none' ? '' : '(reference)';
  return row.ratio?.label ?? '';
}

export interface WarningRow {
  system: string;
  mode: string;
  warning: string;
  /** The workloads and runs it came in: "bulk runs 1, 2; latency run 1". */
  where: string;
}

/** Every warning the systems printed, once per (system, mode, text), with where it came. */
export function warningRows(results: readonly RunResult[]): WarningRow[] {
  const byKey = new Map<string, { row: Omit<WarningRow, 'where'>; runs: Map<Workload, number[]> }>();
  for (const r of results) {
    for (const warning of r.warnings ?? []) {
      const key = `${r.system}\u0000${r.mode}\u0000${warning}`;
      const entry = byKey.get(key) ?? {
        row: { system: r.system, mode: r.mode, warning },
        runs: new Map<Workload, number[]>(),
      };
      entry.runs.set(r.workload, [...(entry.runs.get(r.workload) ?? []), r.run]);
      byKey.set(key, entry);
    }
  }
  return [...byKey.values()].map(({ row, runs }) => ({
    ...row,
    where: [...runs].map(([w, ns]) => `${w} run${ns.length > 1 ? 's' : ''} ${ns.join(', ')}`).join('; '),
  }));
}
