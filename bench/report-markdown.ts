/**
 * docs/BENCHMARKS.md from a full side-by-side result. The hand-written
 * section between `<!-- notes:start -->` and `<!-- notes:end -->` is kept
 * from the page it replaces. Pure: results and notes in, text out.
 */
import { durabilityLines } from './machine.js';
import type { Sizes } from './peers/protocol.js';
import type { Workload } from './peers/types.js';
import {
  failedText,
  formatValue,
  headlineRow,
  medianText,
  rangeText,
  ratioCell,
  same,
  warningRows,
  type CompareResults,
  type Row,
} from './report-rows.js';
import { fmt } from './support.js';

export const NOTES_START = '<!-- notes:start -->';
export const NOTES_END = '<!-- notes:end -->';
const NOTES_PLACEHOLDER = 'Analysis: see the issue notes.';

/** The text between the notes markers of an existing BENCHMARKS.md, if any. */
export function extractNotes(markdown: string | undefined): string | undefined {
  if (markdown === undefined) return undefined;
  const start = markdown.indexOf(NOTES_START);
  const end = markdown.indexOf(NOTES_END);
  if (start < 0 || end < start) return undefined;
  return markdown
    .slice(start + NOTES_START.length, end)
    .replace(/^\n/, '')
    .replace(/\n$/, '');
}

const esc = (s: string): string => s.replace(/\|/g, '\\|');

function mdTable(
  headers: readonly string[],
  rows: readonly (readonly string[])[],
  right: readonly number[] = [],
): string {
  const rule = headers.map((_, i) => (right.includes(i) ? '---:' : '---'));
  return [headers, rule, ...rows].map((r) => `| ${r.map(esc).join(' | ')} |`).join('\n');
}

const completion =
  "until the system's own store counts every job completed (polled every 5 ms once " +
  "every job has started: lanewake's ledger rows, pg-boss's completed rows, " +
  "BullMQ's completed set, graphile-worker's rows inserted less rows left)";

const WORKLOAD_TEXT: Record<Workload, (s: Sizes) => string> = {
  bulk: (s) =>
    `${fmt(s.bulk)} no-op jobs enqueued with the system's batch API in batches of ` +
    `${s.bulkBatch} (timed: **enqueue** jobs/s), then one worker at concurrency ` +
    `${s.concurrency} in the same process drains them, timed from the start-worker ` +
    `call ${completion}: **processing** jobs/s.`,
  latency: (s) =>
    `**Two processes**, as deployed: the run process is the producer, a worker ` +
    `process of its own runs one worker at concurrency ${s.concurrency}, started and ` +
    `left idle for 0.5 s; then ${fmt(s.latency)} jobs are enqueued one at a time ` +
    `with the single-job API at ${s.latencyRatePerS}/s on an absolute schedule (open ` +
    `loop: a slow enqueue does not delay the next one). Latency = handler start in ` +
    `the worker process − the stamp the producer put in the payload just before the ` +
    `enqueue call, both on CLOCK_MONOTONIC (\`process.hrtime\`, one clock for every ` +
    `process of the machine), so it includes the enqueue's own commit. The phase ` +
    `ends only when the store counts every job completed.`,
  'latency-in-process': () =>
    `As latency, but the worker runs in the producer's own process. lanewake's ` +
    `\`wake, in-process handover\` mode is measured here only: sharing one wake ` +
    `channel, its producer hands the wake-up to the worker in memory and inserts ` +
    `items already claimed for it, a shortcut no producer in another process has.`,
  ordered: (s) =>
    `${fmt(s.ordered)} jobs over ${fmt(s.orderedKeys)} keys (job i: key k(i mod ` +
    `${s.orderedKeys}), sequence ⌊i/${s.orderedKeys}⌋), enqueued in batches of ` +
    `${s.bulkBatch}, drained by one worker at concurrency ${s.concurrency}, timed ` +
    `${completion}: processing jobs/s, and **order violations** counted from the ` +
    `recorded handler starts (every start out of sequence for its key, every ` +
    `duplicate start and every job never started).`,
  'four-workers': (s) =>
    `${fmt(s.fourWorkers)} unordered no-op jobs pre-enqueued; ${s.workerProcesses} ` +
    `worker processes connect and report ready, then all are told to start at once ` +
    `(concurrency ${s.concurrency} each); timed from that moment ${completion}. Peak ` +
    `RSS is the largest of the ${s.workerProcesses} processes.`,
  'sixteen-workers': (s) =>
    `As four-workers with ${s.sixteenProcesses} worker processes at concurrency ` +
    `${s.sixteenConcurrency} each (${fmt(s.sixteenWorkers)} jobs): the same machine ` +
    `shared by four times the processes. Peak RSS is the largest of the ` +
    `${s.sixteenProcesses}.`,
  'deep-lane': (s) =>
    `Systems with per-key order only. The in-process latency measurement with ` +
    `${fmt(s.deepLaneJobs)} jobs on fresh keys at ${s.latencyRatePerS}/s, twice in ` +
    `fresh namespaces: once with one key already holding ${fmt(s.deepLaneDepth)} ` +
    `queued jobs (enqueued before the worker starts; it keeps being processed one at ` +
    `a time meanwhile), once without. Reported: both p50s and present / absent (1.0 ` +
    `= a deep lane costs the others nothing).`,
};

function header(r: CompareResults, resultFile: string): string[] {
  return [
    `- **Date:** ${r.finishedAt} (started ${r.startedAt})`,
    `- **Code revision:** ${r.revision}`,
    `- **Runs:** ${r.params.runs} per row, each (system, mode, workload, run) in a ` +
      `fresh process and a fresh namespace; systems interleaved within each run. ` +
      `Median and min–max over the runs that passed the effect check; the failed runs ` +
      `of each row are counted in its own column. Scale ${r.params.scale}.`,
    `- **Command:** \`${r.command}\``,
    `- **Machine:** ${r.machine}`,
    `- **Software:** ${Object.entries(r.software)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
    '- **Durability of the servers during the run** (what a crash can lose of a write reported done):',
    ...durabilityLines(r.durability).map((l) => `  - ${l}`),
    `- **Raw results:** \`${resultFile}\``,
  ];
}

function headline(r: CompareResults): string[] {
  const refLabel = `${r.reference.system} (${r.reference.mode})`;
  const p50 = headlineRow(r);
  if (!p50) return [];
  const other = (metric: string): string => {
    const row = r.rows.find((x) => x.name === `latency ${metric}` && same(x, r.reference));
    return `${metric} ${formatValue(row?.median ?? null, 'ms')} ms`;
  };
  const value =
    p50.median === null
      ? `FAILED (${p50.failedRuns}/${p50.runs} runs)`
      : `**p50 ${formatValue(p50.median, 'ms')} ms** (runs ${rangeText(p50)} ms)`;
  return [
    `**Headline latency:** ${refLabel}, a producer process and a worker process, ` +
      `${fmt(r.sizes.latency)} jobs at ${r.sizes.latencyRatePerS}/s, enqueue→start ` +
      `${value}; ${other('p90')}, ${other('p99')}, ${other('max')}. The in-process ` +
      `figures (latency-in-process) are not the headline: lanewake's in-process ` +
      `handover is a shortcut a producer in another process does not get.`,
    '',
  ];
}

/** docs/BENCHMARKS.md. `notes`: the preserved hand-written section (placeholder when absent). */
export function renderMarkdown(r: CompareResults, notes: string | undefined, resultFile: string): string {
  const ref = r.reference;
  const refLabel = `${ref.system} (${ref.mode})`;
  const line = (x: Row): string[] => [
    x.name,
    x.system,
    x.mode,
    medianText(x),
    rangeText(x),
    x.unit,
    failedText(x),
    ratioCell(x, ref),
  ];
  const headers = ['workload', 'system', 'mode', 'median', 'min–max', 'unit', 'runs failed', `${refLabel} ratio`];
  const right = [3, 4, 6, 7];
  const out: string[] = ['# Benchmarks: lanewake side by side with its peers', ''];
  out.push(
    `<!-- Generated by bench/report.ts from ${resultFile}. Edit only between the ` +
      `notes markers; everything else is rewritten by the next full run. -->`,
    '',
  );
  out.push(...header(r, resultFile), '');
  out.push(...headline(r));
  out.push('![](benchmarks.svg)', '', '## Results', '');
  out.push(
    `The ratio column compares ${refLabel}, lanewake as deployed (Redis wake-ups, ` +
      `the producer with a wake channel of its own), with each row's system from the ` +
      `same invocation: for jobs/s it is ${refLabel} ÷ that system, for latency and ` +
      `memory that system ÷ ${refLabel}, so above 1 means ${refLabel} is ahead by that ` +
      `factor, below 1 (marked behind, slower or more RSS) that it is behind. Every ` +
      `peer runs its best documented configuration for the row; where it has none that ` +
      `works, the row says so under n/a.`,
    '',
  );
  out.push(mdTable(headers, r.rows.filter((x) => !x.rss).map(line), right), '');
  const poll = r.rows.find((x) => x.name === 'latency p50' && x.system === ref.system && x.mode === 'poll 5 s');
  const refP50 = headlineRow(r);
  if (poll?.ratio && refP50?.median != null && poll.median != null) {
    out.push(
      `${refLabel} latency p50 ${formatValue(refP50.median, 'ms')} ms against ` +
        `${formatValue(poll.median, 'ms')} ms when the worker process polls the ledger ` +
        `every 5 s: **${poll.ratio.label}**.`,
      '',
    );
  }
  out.push('### Peak RSS of the worker processes', '');
  out.push(
    'Peak resident memory (`process.resourceUsage().maxRSS`) of each process that ' +
      'ran a worker. For the in-process workloads that is the run process itself, ' +
      'which also enqueued the jobs; every process carries the tsx TypeScript loader, ' +
      'equally for every system.',
    '',
  );
  out.push(mdTable(headers, r.rows.filter((x) => x.rss).map(line), right), '');
  out.push('### Not measured (n/a)', '');
  if (r.notApplicable.length === 0) out.push('Every system ran every workload.');
  else
    out.push(
      mdTable(
        ['workload', 'system', 'mode', 'why'],
        r.notApplicable.map((n) => [n.workload, n.system, n.mode, n.note]),
      ),
    );
  out.push('', '### Failures', '');
  if (r.failures.length === 0) out.push('None: every run passed its effect check.');
  else {
    out.push(
      'These runs failed their effect check or errored; they contribute no number to ' +
        'the tables above (a row all of whose runs failed reads FAILED).',
      '',
    );
    out.push(
      mdTable(
        ['workload', 'system', 'mode', 'run', 'reason'],
        r.failures.map((f) => [f.workload, f.system, f.mode, String(f.run), f.reason.split('\n')[0] ?? '']),
      ),
    );
  }
  out.push('', '### Warnings the systems printed', '');
  const warnings = warningRows(r.results);
  if (warnings.length === 0) out.push('None: no system printed a warning or an error in any run.');
  else
    out.push(
      mdTable(
        ['system', 'mode', 'warning', 'in'],
        warnings.map((w) => [w.system, w.mode, w.warning, w.where]),
      ),
    );
  out.push('');
  const howOrdered = r.factories.flatMap((f) =>
    (['ordered', 'deep-lane'] as const)
      .filter((w) => f.ordersByKey && f.workloads.includes(w) && f.notes[w])
      .map((w) => `${f.system} (${f.mode}), ${w}: ${f.notes[w] ?? ''}`),
  );
  if (howOrdered.length > 0)
    out.push('How each system provides per-key order:', '', ...howOrdered.map((h) => `- ${h}`), '');
  out.push('## Analysis', '', NOTES_START, notes ?? NOTES_PLACEHOLDER, NOTES_END, '');
  out.push('## What each workload does', '');
  for (const w of r.params.workloads) out.push(`- **${w}**: ${WORKLOAD_TEXT[w](r.sizes)}`);
  out.push('', '## The effect check', '');
  out.push(
    "Each job carries a number 0…N−1, and each adapter's handler reports the job it " +
      'starts to the harness (`onJob`; from a worker process over IPC). After every ' +
      'phase, once the worker has stopped, the harness checks that every number was ' +
      "started, none twice, and none it never enqueued, and that the system's own " +
      "store counts exactly N jobs completed (lanewake's ledger, pg-boss's job table " +
      "and archive, BullMQ's completed set, graphile-worker's rows inserted less rows " +
      'left: it deletes a job as it records its completion). Every system here ' +
      'promises exactly one run per job when nothing fails, so a run that loses or ' +
      'repeats a single job, whose store count is off, that stalls (no job started, or ' +
      'no completion counted, for 20 s while some are missing), or that errors is a ' +
      '**failure**: it is listed above, gives no number, and the harness exits ' +
      'non-zero. For the ordered workloads the same records give the order-violation ' +
      'count.',
    '',
  );
  out.push('## Reproducing', '', '```sh');
  out.push(
    'npm run bench                                  # = lanewake bench compare: ' +
      'every system and workload, 3 runs, full size',
  );
  out.push('npm run bench -- --runs 1 --scale 0.1 --systems lanewake,bullmq --workloads bulk,latency');
  out.push(`npx tsx bench/report.ts ${resultFile}   # re-render this page from a saved full result`);
  out.push('```', '');
  out.push(
    'Only a full run (every system and workload, scale 1, at least 3 runs) rewrites ' +
      'this page, its chart and `bench/results/latest.json`; any other run writes only ' +
      'its own `bench/results/compare-<time>.json`, which is not committed. MariaDB on ' +
      '127.0.0.1:3306 (root), Redis on 127.0.0.1:6379 and PostgreSQL on 127.0.0.1:5432 ' +
      '(postgres) must be running.',
    '',
  );
  return out.join('\n');
}
