/**
 * docs/benchmarks.svg from a full side-by-side result: processing jobs/s per workload, then the two-process
 * latency p50 / p99 (log scale). Pure: results in, SVG text out.
 */
import { formatValue, same, type CompareResults } from './report-rows.js';
import { fmt } from './support.js';

const COLORS: Record<string, string> = {
  lanewake: '#1f5fbf',
  bullmq: '#d9534f',
  'graphile-worker': '#2e8b57',
  'pg-boss': '#8e44ad',
};
const xml = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const ROWS = {
  throughput: [
    ['bulk processing', 'bulk: no-op jobs, one process, concurrency 32, until the store counts them completed'],
    ['ordered processing', 'ordered: 1,000 keys, per-key FIFO'],
    ['four-workers processing', 'four-workers: 4 processes × concurrency 32'],
    ['sixteen-workers processing', 'sixteen-workers: 16 processes × concurrency 8'],
  ],
  latency: [
    ['latency p50', 'latency p50 (enqueue in the producer process → handler start in the worker process)'],
    ['latency p99', 'latency p99'],
  ],
} as const;

/** docs/benchmarks.svg: processing jobs/s per workload, then latency p50 / p99 (log scale). */
export function renderSvg(r: CompareResults): string {
  const width = 960;
  const left = Math.ceil(Math.max(20, ...r.factories.map((f) => f.system.length + f.mode.length + 3)) * 6.2) + 24;
  const plotW = width - left - 110;
  const out: string[] = [];
  let y = 10;
  const panel = (title: string, rows: readonly (readonly [string, string])[], log: boolean): void => {
    out.push(`<text x="12" y="${y + 16}" class="title">${xml(title)}</text>`);
    y += 30;
    const shown = rows.filter(([name]) => r.rows.some((x) => x.name === name));
    const present = r.factories.filter((f) =>
      shown.some(([name]) => r.rows.some((x) => x.name === name && same(x, f))),
    );
    const values = r.rows.filter((x) => shown.some(([n]) => n === x.name)).flatMap((x) => x.median ?? []);
    const hi = Math.max(1e-9, ...values);
    const lo = log ? 10 ** Math.floor(Math.log10(Math.min(hi, ...values.filter((v) => v > 0)))) : 0;
    const pos = (v: number): number =>
      log
        ? (Math.log10(Math.max(v, lo) / lo) / Math.max(1e-9, Math.log10((hi * 1.05) / lo))) * plotW
        : (v / hi) * plotW;
    for (const [name, group] of shown) {
      out.push(`<text x="12" y="${y + 12}" class="group">${xml(group)}</text>`);
      y += 18;
      for (const f of present) {
        const row = r.rows.find((x) => x.name === name && same(x, f));
        const label = `${f.system} (${f.mode})`;
        const ref = same(f, r.reference) ? ' ref' : '';
        out.push(`<text x="${left - 8}" y="${y + 11}" text-anchor="end" class="label${ref}">${xml(label)}</text>`);
        const v = row?.median ?? null;
        if (v !== null && v > 0) {
          const w = Math.max(1, pos(v));
          const text = log ? `${formatValue(v, 'ms')} ms` : fmt(v);
          out.push(
            `<rect x="${left}" y="${y}" width="${w.toFixed(1)}" height="14" fill="${COLORS[f.system] ?? '#888'}"/>`,
            `<text x="${(left + w + 4).toFixed(1)}" y="${y + 11}" class="value">${xml(text)}</text>`,
          );
        } else {
          out.push(
            `<text x="${left + 4}" y="${y + 11}" class="${row ? 'note' : 'na'}">${row ? 'failed' : 'n/a'}</text>`,
          );
        }
        y += 18;
      }
      y += 8;
    }
    y += 10;
  };
  panel('Processing throughput, jobs/s (higher is better)', ROWS.throughput, false);
  const latencyTitle = `Latency at ${r.sizes.latencyRatePerS} jobs/s into an idle worker process, ms`;
  panel(`${latencyTitle} (lower is better; log scale)`, ROWS.latency, true);
  const height = y + 24;
  const footer =
    `Median of ${r.params.runs} run(s) at scale ${r.params.scale}, ${r.finishedAt.slice(0, 10)}, code ` +
    `${r.revision}; ${r.machine.split(';')[0]}. Machine, durability settings and command: docs/BENCHMARKS.md.`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
      `viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">`,
    '<style>.title { font-size: 15px; font-weight: bold; } .group { font-size: 12px; font-weight: bold; }',
    '.label, .value, .note, .na { font-size: 11px; } .ref { font-weight: bold; } .note { fill: #b00; }',
    '.na { fill: #999; font-style: italic; } .tick { font-size: 10px; fill: #777; }</style>',
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    ...out,
    `<text x="12" y="${height - 8}" class="tick">${xml(footer)}</text>`,
    '</svg>',
    '',
  ].join('\n');
}
