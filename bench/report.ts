/**
 * The published outputs of a full side-by-side run (bench/compare.ts):
 * bench/results/latest.json, docs/BENCHMARKS.md (bench/report-markdown.ts)
 * and docs/benchmarks.svg (bench/report-svg.ts). Run this file on a saved
 * full result to regenerate them without measuring again:
 *
 *   npx tsx bench/report.ts bench/results/compare-2026-01-01T00-00-00Z.json
 *
 * The hand-written section between `<!-- notes:start -->` and
 * `<!-- notes:end -->` in docs/BENCHMARKS.md survives every regeneration.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { extractNotes, renderMarkdown } from './report-markdown.js';
import { COMPARE_FORMAT, headlineRow, summarize, warningRows, type CompareResults } from './report-rows.js';
import { renderSvg } from './report-svg.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

function round(n: number | null): number | null {
  if (n === null) return null;
  const f = 10 ** (Math.abs(n) >= 100 ? 1 : 3);
  return Math.round(n * f) / f;
}

/** bench/results/latest.json: every row, a failed one included, with what it was measured on. */
export function latestJson(r: CompareResults, resultFile: string) {
  return {
    format: 'lanewake-compare-latest/2' as const,
    revision: r.revision,
    date: r.finishedAt,
    runs: r.params.runs,
    scale: r.params.scale,
    command: r.command,
    machine: r.machine,
    software: r.software,
    durability: r.durability,
    reference: r.reference,
    headlineLatencyP50Ms: round(headlineRow(r)?.median ?? null),
    rows: r.rows.map((x) => ({
      workload: x.name,
      system: x.system,
      mode: x.mode,
      unit: x.unit,
      // failed: every run failed, so there is no number.
      status: x.median === null ? 'failed' : x.failedRuns > 0 ? 'some runs failed' : 'ok',
      median: round(x.median),
      min: round(x.min),
      max: round(x.max),
      runs: x.runs,
      failedRuns: x.failedRuns,
      ratio: x.ratio?.label ?? null,
    })),
    notApplicable: r.notApplicable,
    warnings: warningRows(r.results),
    source: resultFile,
  };
}

/** Writes bench/results/latest.json, docs/BENCHMARKS.md (keeping its notes section) and docs/benchmarks.svg. */
export function writePublished(
  r: CompareResults,
  resultFile: string,
  root = ROOT,
): { latest: string; markdown: string; svg: string } {
  if (!r.full) throw new Error(`${resultFile} is not a full run: only a full run may replace the published results`);
  const docsDir = `${root}docs`;
  mkdirSync(docsDir, { recursive: true });
  mkdirSync(`${root}bench/results`, { recursive: true });
  const latest = `${root}bench/results/latest.json`;
  const markdown = `${docsDir}/BENCHMARKS.md`;
  const svg = `${docsDir}/benchmarks.svg`;
  const notes = extractNotes(existsSync(markdown) ? readFileSync(markdown, 'utf8') : undefined);
  writeFileSync(latest, `${JSON.stringify(latestJson(r, resultFile), null, 2)}\n`);
  writeFileSync(markdown, renderMarkdown(r, notes, resultFile));
  writeFileSync(svg, renderSvg(r));
  return { latest, markdown, svg };
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
  if (r.format !== COMPARE_FORMAT) {
    console.error(
      `${file} is ${String(r.format)}, not ${COMPARE_FORMAT}: it was measured by an ` +
        `older harness (no durability settings, no completion clock); run the benchmark ` +
        `again`,
    );
    process.exit(2);
  }
  r.rows = summarize(r);
  const rel = resolve(file).startsWith(ROOT) ? resolve(file).slice(ROOT.length) : file;
  try {
    const out = writePublished(r, rel);
    console.log(`wrote ${out.latest}, ${out.markdown} and ${out.svg} from ${rel}`);
  } catch (e) {
    console.error(e instanceof Error ? e.message : String(e));
    process.exit(2);
  }
}
