/**
 * docs/benchmarks.svg from a full side-by-side result: processing jobs/s per
 * workload, then the two-process latency p50 / p99 (log scale). Pure:
 * results in, SVG text out.
 */
import { formatValue, same, type CompareResults, type FactoryInfo } from './report-rows.js';
import { fmt } from './support.js';

const PALETTE: Record<string, readonly string[]> = {
  lanewake: ['#1f5fbf', '#6f9fe0', '#a9c6ef', '#d3e2f7'],
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

const xml = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

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
function panel(
  title: string,
  groups: readonly Group[],
  y0: number,
  width: number,
  left: number,
  scale: 'linear' | 'log',
  unit: string,
): [string, number] {
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
      parts.push(
        `<text x="${left - 8}" y="${y + barH - 3}" text-anchor="end" ` +
          `class="${b.bold ? 'label ref' : 'label'}">${xml(b.label)}</text>`,
      );
      if (b.value !== null && b.value > 0) {
        const w = Math.max(1, pos(b.value));
        parts.push(
          `<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="${barH}" ` +
            `fill="${b.color}"><title>${xml(`${b.label}: ${fmt(b.value, unit === 'ms' ? 2 : 0)} ${unit}`)}` +
            '</title></rect>',
        );
        parts.push(
          `<text x="${(left + w + 4).toFixed(1)}" y="${y + barH - 3}" ` +
            `class="value">${xml(unit === 'ms' ? `${formatValue(b.value, 'ms')} ms` : fmt(b.value))}</text>`,
        );
      } else {
        parts.push(
          `<text x="${left + 4}" y="${y + barH - 3}" ` +
            `class="${b.note === 'n/a' ? 'na' : 'note'}">${xml(b.note ?? 'failed')}</text>`,
        );
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
    const present = r.factories.filter((f) =>
      specs.some(([name]) => r.rows.some((x) => x.name === name && same(x, f))),
    );
    return specs
      .filter(([name]) => r.rows.some((x) => x.name === name))
      .map(([name, title]) => ({
        title,
        bars: present.map((f) => {
          const row = r.rows.find((x) => x.name === name && same(x, f));
          return {
            label: `${f.system} (${f.mode})`,
            value: row?.median ?? null,
            color: colorOf(f),
            bold: same(f, r.reference),
            note: row ? 'failed' : 'n/a',
          };
        }),
      }));
  };
  const throughput = groupsFor([
    ['bulk processing', 'bulk: no-op jobs, one process, concurrency 32, until the store counts them completed'],
    ['ordered processing', 'ordered: 1,000 keys, per-key FIFO'],
    ['four-workers processing', 'four-workers: 4 processes × concurrency 32'],
    ['sixteen-workers processing', 'sixteen-workers: 16 processes × concurrency 8'],
  ]);
  const latency = groupsFor([
    ['latency p50', 'latency p50 (enqueue in the producer process → handler start in the worker process)'],
    ['latency p99', 'latency p99'],
  ]);
  const labelChars = Math.max(20, ...r.factories.map((f) => f.system.length + f.mode.length + 3));
  const left = Math.ceil(labelChars * 6.2) + 24;
  const [a, ha] = panel(
    'Processing throughput, jobs/s (higher is better)',
    throughput,
    10,
    width,
    left,
    'linear',
    'jobs/s',
  );
  const [b, hb] = panel(
    `Latency at ${r.sizes.latencyRatePerS} jobs/s into an idle worker process, ms (lower is better; log scale)`,
    latency,
    10 + ha + 10,
    width,
    left,
    'log',
    'ms',
  );
  const height = 10 + ha + 10 + hb + 24;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
      `viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">`,
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
    `<text x="12" y="${height - 8}" ` +
      `class="tick">${xml(
        `Median of ${r.params.runs} run(s) at scale ${r.params.scale}, ${r.finishedAt.slice(0, 10)}, ` +
          `code ${r.revision}; ${cpuSummary(r.machine)}. Machine, durability settings and command: ` +
          'docs/BENCHMARKS.md.',
      )}</text>`,
    '</svg>',
    '',
  ].join('\n');
}
