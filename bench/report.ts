/**
 * Rendering of a side-by-side benchmark result (bench/compare.ts): rows with
 * medians and ratios, bench/results/latest.json, docs/BENCHMARKS.md and the
 * SVG chart docs/benchmarks.svg. The functions are pure (results in, text
 * out) except `writeDocs`; run this file on a saved result to regenerate the
 * docs without measuring again:
 *
 *   npx tsx bench/report.ts bench/results/compare-2026-01-01T00-00-00Z.json
 *
 * The hand-written section between `<!-- notes:start -->` and
 * `<!-- notes:end -->` in docs/BENCHMARKS.md survives every regeneration.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { METRICS, rowName, type Better, type RunResult, type Sizes } from './peers/protocol.js';
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

/** Everything one invocation of bench/compare.ts measured (bench/results/compare-*.json). */
export interface CompareResults {
  format: 'lanewake-compare/1';
  startedAt: string;
  finishedAt: string;
  command: string;
  machine: string;
  /** Server and library versions, e.g. { MariaDB: '10.11.6', bullmq: '5.1.0' }. */
  software: Record<string, string>;
  /** `git rev-parse --short HEAD`, `+dirty` when src/ or bench/ differ from it. */
  revision: string;
  params: { runs: number; scale: number; systems: string[] | null; workloads: Workload[] };
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
  /** > 1: lanewake is better by this factor. */
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
  median: number | null;
  min: number | null;
  max: number | null;
  runs: number;
  failedRuns: number;
  ratio: Ratio | null;
}

const same = (a: { system: string; mode: string }, b: { system: string; mode: string }): boolean => a.system === b.system && a.mode === b.mode;

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

function ratioText(v: number): string {
  if (v >= 100) return fmt(v, 0);
  if (v >= 10) return fmt(v, 1);
  return fmt(v, 2);
}

/** Rows (median, min–max, lanewake ratio) from the raw run results, in table order. */
export function summarize(r: Pick<CompareResults, 'results' | 'factories' | 'reference' | 'params'>): Row[] {
  const rows: Row[] = [];
  const workloads = r.params.workloads;
  for (const m of METRICS) {
    if (!workloads.includes(m.workload)) continue;
    for (const f of r.factories) {
      const runs = r.results.filter((x) => x.workload === m.workload && same(x, f));
      if (runs.length === 0) continue;
      const passed = runs.filter((x) => x.ok);
      const values = passed.map((x) => x.values[m.metric]).filter((v): v is number => v !== undefined && Number.isFinite(v));
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

/** bench/results/latest.json. */
export function latestJson(r: CompareResults): { rows: { workload: string; system: string; mode: string; median: number; min: number; max: number; unit: string }[]; machine: string; command: string } {
  return {
    rows: r.rows
      .filter((x) => x.median !== null && x.min !== null && x.max !== null)
      .map((x) => ({ workload: x.name, system: x.system, mode: x.mode, median: round(x.median!), min: round(x.min!), max: round(x.max!), unit: x.unit })),
    machine: r.machine,
    command: r.command,
  };
}

function round(n: number): number {
  const digits = Math.abs(n) >= 100 ? 1 : 3;
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

export function formatValue(v: number | null, unit: string): string {
  if (v === null || !Number.isFinite(v)) return '—';
  if (unit === 'ms') return fmt(v, v >= 100 ? 0 : 2);
  if (unit === 'ratio') return fmt(v, 2);
  if (unit === 'MB') return fmt(v, 0);
  return fmt(v, 0);
}

function rangeText(row: Row): string {
  if (row.min === null || row.max === null) return '—';
  return `${formatValue(row.min, row.unit)}–${formatValue(row.max, row.unit)}`;
}

function medianText(row: Row): string {
  if (row.median === null) return `FAILED (${row.failedRuns}/${row.runs} runs)`;
  const failed = row.failedRuns > 0 ? ` (${row.failedRuns}/${row.runs} runs failed)` : '';
  return `${formatValue(row.median, row.unit)}${failed}`;
}

export function ratioCell(row: Row, reference: { system: string; mode: string }): string {
  if (same(row, reference)) return row.better === 'none' ? '' : '(reference)';
  return row.ratio?.label ?? '';
}

const esc = (s: string): string => s.replace(/\|/g, '\\|');

function mdTable(headers: readonly string[], rows: readonly (readonly string[])[], right: readonly number[] = []): string {
  const rule = headers.map((_, i) => (right.includes(i) ? '---:' : '---'));
  return [headers, rule, ...rows].map((r) => `| ${r.map(esc).join(' | ')} |`).join('\n');
}

/** The text between the notes markers of an existing BENCHMARKS.md, if any. */
export function extractNotes(markdown: string | undefined): string | undefined {
  if (markdown === undefined) return undefined;
  const start = markdown.indexOf(NOTES_START);
  const end = markdown.indexOf(NOTES_END);
  if (start < 0 || end < start) return undefined;
  return markdown.slice(start + NOTES_START.length, end).replace(/^\n/, '').replace(/\n$/, '');
}

export const NOTES_START = '<!-- notes:start -->';
export const NOTES_END = '<!-- notes:end -->';
const NOTES_PLACEHOLDER = 'Analysis: see the issue notes.';

const WORKLOAD_TEXT: Record<Workload, (s: Sizes) => string> = {
  bulk: (s) =>
    `${fmt(s.bulk)} no-op jobs enqueued with the system's batch API in batches of ${s.bulkBatch} (timed: **enqueue** jobs/s), then one worker at concurrency ${s.concurrency} in the same process drains them (timed from the start-worker call until every job has started: **processing** jobs/s).`,
  latency: (s) =>
    `A worker at concurrency ${s.concurrency} is started and left idle for 0.5 s; then ${fmt(s.latency)} jobs are enqueued one at a time with the single-job API at ${s.latencyRatePerS}/s on an absolute schedule (open loop: a slow enqueue does not delay the next one). Latency = handler start − the instant just before the enqueue call (same process, same clock), so it includes the enqueue's own commit.`,
  ordered: (s) =>
    `${fmt(s.ordered)} jobs over ${fmt(s.orderedKeys)} keys (job i: key k(i mod ${s.orderedKeys}), sequence ⌊i/${s.orderedKeys}⌋), enqueued in batches of ${s.bulkBatch}, drained by one worker at concurrency ${s.concurrency}: processing jobs/s, and **order violations** counted from the recorded handler starts (every start out of sequence for its key, every duplicate start and every job never started).`,
  'four-workers': (s) =>
    `${fmt(s.fourWorkers)} unordered no-op jobs pre-enqueued; ${s.workerProcesses} worker processes connect and report ready, then all are told to start at once (concurrency ${s.concurrency} each); timed until every job has started somewhere (effects reach the parent over IPC). Peak RSS is the largest of the ${s.workerProcesses} processes.`,
  'sixteen-workers': (s) =>
    `As four-workers with ${s.sixteenProcesses} worker processes at concurrency ${s.sixteenConcurrency} each (${fmt(s.sixteenWorkers)} jobs): the same machine shared by four times the processes. Peak RSS is the largest of the ${s.sixteenProcesses}.`,
  'deep-lane': (s) =>
    `Systems with per-key order only. The latency measurement with ${fmt(s.deepLaneJobs)} jobs on fresh keys at ${s.latencyRatePerS}/s, twice in fresh namespaces: once with one key already holding ${fmt(s.deepLaneDepth)} queued jobs (enqueued before the worker starts; it keeps being processed one at a time meanwhile), once without. Reported: both p50s and present / absent (1.0 = a deep lane costs the others nothing).`,
};

/** docs/BENCHMARKS.md. `notes`: the preserved hand-written section (placeholder when absent). */
export function renderMarkdown(r: CompareResults, notes: string | undefined, resultFile: string): string {
  const ref = r.reference;
  const refLabel = `${ref.system} (${ref.mode})`;
  const main = r.rows.filter((x) => !x.rss);
  const rss = r.rows.filter((x) => x.rss);
  const line = (x: Row): string[] => [x.name, x.system, x.mode, medianText(x), rangeText(x), x.unit, ratioCell(x, ref)];
  const headers = ['workload', 'system', 'mode', 'median', 'min–max', 'unit', `${refLabel} ratio`];
  const s = r.sizes;
  const out: string[] = [];
  out.push('# Benchmarks: lanewake side by side with its peers');
  out.push('');
  out.push(`<!-- Generated by bench/report.ts from ${resultFile}. Edit only between the notes markers; everything else is rewritten by the next run. -->`);
  out.push('');
  out.push(`- **Date:** ${r.finishedAt}`);
  out.push(`- **Command:** \`${r.command}\``);
  out.push(`- **Machine:** ${r.machine}`);
  out.push(`- **Software:** ${Object.entries(r.software).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  out.push(`- **Code:** ${r.revision}`);
  out.push(`- **Runs:** ${r.params.runs} per row, each (system, mode, workload, run) in a fresh process and a fresh namespace; systems interleaved within each run. Median, min–max over the runs that passed the effect check. Scale ${r.params.scale}${r.params.scale !== 1 ? ' (**not the full-size workloads**)' : ''}.`);
  out.push(`- **Raw results:** \`${resultFile}\``);
  out.push('');
  out.push('![](benchmarks.svg)');
  out.push('');
  out.push('## Results');
  out.push('');
  out.push(`The ratio column compares ${refLabel} with each row's system from the same invocation: for jobs/s it is ${refLabel} ÷ that system, for latency and memory that system ÷ ${refLabel}, so above 1 means ${refLabel} is ahead by that factor, below 1 (marked behind, slower or more RSS) that it is behind.`);
  out.push('');
  out.push(mdTable(headers, main.map(line), [3, 4, 6]));
  out.push('');
  const pollP50 = r.rows.find((x) => x.name === 'latency p50' && x.system === ref.system && x.mode === 'poll 5 s');
  const refP50 = r.rows.find((x) => x.name === 'latency p50' && same(x, ref));
  if (pollP50?.ratio && refP50?.median != null && pollP50.median != null) {
    out.push(`${refLabel} latency p50 ${formatValue(refP50.median, 'ms')} ms against ${formatValue(pollP50.median, 'ms')} ms when polling the ledger every 5 s: **${pollP50.ratio.label}**.`);
    out.push('');
  }
  out.push('### Peak RSS of the worker processes');
  out.push('');
  out.push(
    'Peak resident memory (`process.resourceUsage().maxRSS`) of each process that ran a worker. For the in-process workloads that is the run process itself, which also enqueued the jobs; every process carries the tsx TypeScript loader, equally for every system.',
  );
  out.push('');
  out.push(mdTable(headers, rss.map(line), [3, 4, 6]));
  out.push('');
  out.push('### Not measured (n/a)');
  out.push('');
  if (r.notApplicable.length === 0) out.push('Every selected system ran every selected workload.');
  else out.push(mdTable(['workload', 'system', 'mode', 'why'], r.notApplicable.map((n) => [n.workload, n.system, n.mode, n.note])));
  out.push('');
  out.push('### Failures');
  out.push('');
  if (r.failures.length === 0) out.push('None: every run passed its effect check.');
  else {
    out.push('These runs failed their effect check or errored; they contribute no number to the table above.');
    out.push('');
    out.push(mdTable(['workload', 'system', 'mode', 'run', 'reason'], r.failures.map((f) => [f.workload, f.system, f.mode, String(f.run), f.reason.split('\n')[0] ?? ''])));
  }
  out.push('');
  const howProvided = r.factories
    .flatMap((f) => (['ordered', 'deep-lane'] as const).filter((w) => f.ordersByKey && f.workloads.includes(w) && f.notes[w]).map((w) => `${f.system} (${f.mode}), ${w}: ${f.notes[w] ?? ''}`));
  if (howProvided.length > 0) {
    out.push('How each system provides per-key order:');
    out.push('');
    for (const h of howProvided) out.push(`- ${h}`);
    out.push('');
  }
  out.push('## Analysis');
  out.push('');
  out.push(NOTES_START);
  out.push(notes ?? NOTES_PLACEHOLDER);
  out.push(NOTES_END);
  out.push('');
  out.push('## What each workload does');
  out.push('');
  for (const w of r.params.workloads) out.push(`- **${w}**: ${WORKLOAD_TEXT[w](s)}`);
  out.push('');
  out.push('## The effect check');
  out.push('');
  out.push(
    "Each job carries a number 0…N−1, and each adapter's handler reports the job it starts to the harness (`onJob`). After every run the harness checks that every number was started, none twice, and none it never enqueued; where the system keeps completed jobs in its own store (lanewake's ledger, BullMQ without removeOnComplete) it also compares the system's completed count with N. Every system here promises exactly one run per job when nothing fails, so a run that loses or repeats a single job, stalls (no job started for 20 s while some are missing), or errors is a **failure**: it is listed above, gives no number, and the harness exits non-zero. For the ordered workloads the same records give the order-violation count.",
  );
  out.push('');
  out.push('## Reproducing');
  out.push('');
  out.push('```sh');
  out.push('npm run bench                                  # = lanewake bench compare: every system, 3 runs, full size');
  out.push('npm run bench -- --runs 1 --scale 0.1 --systems lanewake,bullmq --workloads bulk,latency');
  out.push(`npx tsx bench/report.ts ${resultFile}   # re-render this page from a saved result`);
  out.push('```');
  out.push('');
  out.push('MariaDB on 127.0.0.1:3306 (root), Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 (postgres) must be running.');
  out.push('');
  return out.join('\n');
}

// ---------------------------------------------------------------------------
// SVG chart.

const PALETTE: Record<string, readonly string[]> = {
  lanewake: ['#1f5fbf', '#6f9fe0', '#a9c6ef'],
  bullmq: ['#d9534f', '#e88a87'],
  'graphile-worker': ['#2e8b57', '#74c69d', '#b7e4c7'],
  'pg-boss': ['#8e44ad', '#c39bd3'],
};
const FALLBACK = ['#e67e22', '#f1c40f', '#16a085', '#7f8c8d'];

function colorMap(factories: readonly FactoryInfo[]): Map<string, string> {
  const m = new Map<string, string>();
  const used = new Map<string, number>();
  let fallback = 0;
  for (const f of factories) {
    const i = used.get(f.system) ?? 0;
    used.set(f.system, i + 1);
    const c = PALETTE[f.system]?.[i] ?? FALLBACK[fallback++ % FALLBACK.length]!;
    m.set(`${f.system}\u0000${f.mode}`, c);
  }
  return m;
}

const xml = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

interface Group {
  title: string;
  bars: { label: string; value: number | null; color: string; bold: boolean; note?: string }[];
}

function niceStep(max: number): number {
  const raw = max / 5;
  const p = 10 ** Math.floor(Math.log10(raw));
  const n = raw / p;
  return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10) * p;
}

/** One panel of grouped horizontal bars; returns [svg fragment, height]. */
function panel(title: string, groups: readonly Group[], y0: number, width: number, left: number, scale: 'linear' | 'log', unit: string): [string, number] {
  const right = 110;
  const barH = 14;
  const gap = 4;
  const plotW = width - left - right;
  const parts: string[] = [];
  let y = y0;
  parts.push(`<text x="12" y="${y + 16}" class="title">${xml(title)}</text>`);
  y += 30;
  const values = groups.flatMap((g) => g.bars.map((b) => b.value)).filter((v): v is number => v !== null && v > 0);
  if (values.length === 0) {
    parts.push(`<text x="${left}" y="${y + 12}" class="note">no data</text>`);
    return [parts.join('\n'), y + 24 - y0];
  }
  let pos: (v: number) => number;
  let ticks: { v: number; label: string }[];
  if (scale === 'log') {
    const lo = 10 ** Math.floor(Math.log10(Math.min(...values)));
    const hi = 10 ** Math.ceil(Math.log10(Math.max(...values)));
    const span = Math.max(1e-9, Math.log10(hi) - Math.log10(lo));
    pos = (v) => ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / span) * plotW;
    ticks = [];
    for (let v = lo; v <= hi * 1.0001; v *= 10) ticks.push({ v, label: `${fmt(v, v < 1 ? 1 : 0)} ${unit}` });
  } else {
    const step = niceStep(Math.max(...values));
    const hi = Math.ceil(Math.max(...values) / step) * step;
    pos = (v) => (v / hi) * plotW;
    ticks = [];
    for (let v = 0; v <= hi + step / 2; v += step) ticks.push({ v, label: fmt(v) });
  }
  const plotTop = y;
  for (const g of groups) {
    parts.push(`<text x="12" y="${y + 12}" class="group">${xml(g.title)}</text>`);
    y += 18;
    for (const b of g.bars) {
      parts.push(`<text x="${left - 8}" y="${y + barH - 3}" text-anchor="end" class="${b.bold ? 'label ref' : 'label'}">${xml(b.label)}</text>`);
      if (b.value !== null && b.value > 0) {
        const w = Math.max(1, pos(b.value));
        parts.push(`<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${barH}" fill="${b.color}"><title>${xml(`${b.label}: ${fmt(b.value, unit === 'ms' ? 2 : 0)} ${unit}`)}</title></rect>`);
        parts.push(`<text x="${(left + w + 4).toFixed(1)}" y="${y + barH - 3}" class="value">${xml(unit === 'ms' ? `${formatValue(b.value, 'ms')} ms` : fmt(b.value))}</text>`);
      } else {
        parts.push(`<text x="${left + 4}" y="${y + barH - 3}" class="${b.note === 'n/a' ? 'na' : 'note'}">${xml(b.note ?? 'failed')}</text>`);
      }
      y += barH + gap;
    }
    y += 8;
  }
  const grid: string[] = [];
  for (const t of ticks) {
    const x = (left + pos(t.v)).toFixed(1);
    grid.push(`<line x1="${x}" y1="${plotTop}" x2="${x}" y2="${y}" class="grid"/>`);
    grid.push(`<text x="${x}" y="${y + 12}" text-anchor="middle" class="tick">${xml(t.label)}</text>`);
  }
  return [[...parts.slice(0, 1), ...grid, ...parts.slice(1)].join('\n'), y + 22 - y0];
}

/** "AMD EPYC, 2 cores; …" → "AMD EPYC, 2 cores". */
function cpuSummary(machine: string): string {
  return machine.split(';')[0] ?? machine;
}

/** docs/benchmarks.svg: processing jobs/s per workload, then latency p50 / p99 (log scale). */
export function renderSvg(r: CompareResults): string {
  const width = 960;
  const colors = colorMap(r.factories);
  const colorOf = (x: { system: string; mode: string }): string => colors.get(`${x.system}\u0000${x.mode}`) ?? '#888';
  /**
   * One group per row name; every (system, mode) shown anywhere in the panel
   * gets a bar in each group, "n/a" where it does not run that workload.
   */
  const groupsFor = (specs: readonly (readonly [name: string, title: string])[]): Group[] => {
    const present = r.factories.filter((f) => specs.some(([name]) => r.rows.some((x) => x.name === name && same(x, f))));
    return specs
      .filter(([name]) => r.rows.some((x) => x.name === name))
      .map(([name, title]) => ({
        title,
        bars: present.map((f) => {
          const row = r.rows.find((x) => x.name === name && same(x, f));
          return { label: `${f.system} (${f.mode})`, value: row?.median ?? null, color: colorOf(f), bold: same(f, r.reference), note: row ? 'failed' : 'n/a' };
        }),
      }));
  };
  const throughput = groupsFor([
    ['bulk processing', 'bulk: no-op jobs, one process, concurrency 32'],
    ['ordered processing', 'ordered: 1,000 keys, per-key FIFO'],
    ['four-workers processing', 'four-workers: 4 processes × concurrency 32'],
    ['sixteen-workers processing', 'sixteen-workers: 16 processes × concurrency 8'],
  ]);
  const latency = groupsFor([
    ['latency p50', 'latency p50 (enqueue → handler start)'],
    ['latency p99', 'latency p99'],
  ]);
  const labelChars = Math.max(20, ...r.factories.map((f) => f.system.length + f.mode.length + 3));
  const left = Math.ceil(labelChars * 6.2) + 24;
  const [a, ha] = panel('Processing throughput, jobs/s (higher is better)', throughput, 10, width, left, 'linear', 'jobs/s');
  const [b, hb] = panel('Latency at 200 jobs/s into idle workers, ms (lower is better; log scale)', latency, 10 + ha + 10, width, left, 'log', 'ms');
  const height = 10 + ha + 10 + hb + 24;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    '<style>',
    '.title { font-size: 15px; font-weight: bold; fill: #222; }',
    '.group { font-size: 12px; font-weight: bold; fill: #444; }',
    '.label { font-size: 11px; fill: #333; }',
    '.ref { font-weight: bold; }',
    '.value { font-size: 11px; fill: #222; }',
    '.note { font-size: 11px; fill: #b00; font-weight: bold; }',
    '.na { font-size: 11px; fill: #999; font-style: italic; }',
    '.tick { font-size: 10px; fill: #777; }',
    '.grid { stroke: #e4e4e4; stroke-width: 1; }',
    '</style>',
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    a,
    b,
    `<text x="12" y="${height - 8}" class="tick">${xml(`Median of ${r.params.runs} run(s) at scale ${r.params.scale}, ${r.finishedAt.slice(0, 10)}; ${cpuSummary(r.machine)}. Machine and command: docs/BENCHMARKS.md.`)}</text>`,
    '</svg>',
    '',
  ].join('\n');
}

// ---------------------------------------------------------------------------
// Files.

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** Writes docs/BENCHMARKS.md (keeping its notes section) and docs/benchmarks.svg. */
export function writeDocs(r: CompareResults, resultFile: string, docsDir = `${ROOT}docs`): { markdown: string; svg: string } {
  mkdirSync(docsDir, { recursive: true });
  const markdown = `${docsDir}/BENCHMARKS.md`;
  const svg = `${docsDir}/benchmarks.svg`;
  const notes = extractNotes(existsSync(markdown) ? readFileSync(markdown, 'utf8') : undefined);
  writeFileSync(markdown, renderMarkdown(r, notes, resultFile));
  writeFileSync(svg, renderSvg(r));
  return { markdown, svg };
}

function isMain(): boolean {
  const entry = process.argv[1];
  return entry !== undefined && resolve(entry) === fileURLToPath(import.meta.url);
}

if (isMain()) {
  const file = process.argv[2];
  if (!file) {
    console.error('usage: tsx bench/report.ts bench/results/compare-<timestamp>.json');
    process.exit(2);
  }
  const r = JSON.parse(readFileSync(file, 'utf8')) as CompareResults;
  r.rows = summarize(r);
  const rel = resolve(file).startsWith(ROOT) ? resolve(file).slice(ROOT.length) : file;
  const { markdown, svg } = writeDocs(r, rel);
  console.log(`wrote ${markdown} and ${svg} from ${rel}`);
}
