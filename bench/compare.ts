/**
 * Side-by-side benchmark (issue 5): the same workloads against lanewake and
 * its peers (BullMQ, graphile-worker, pg-boss), each in its best documented
 * configuration, on this machine, in one invocation.
 *
 *   npm run bench                                   # lanewake bench compare: the full run
 *   npx tsx bench/compare.ts --runs 1 --scale 0.1 --systems lanewake
 *   npx tsx bench/compare.ts --systems lanewake:wake,bullmq --workloads bulk,latency --json
 *
 * Flags: --runs N (default 3), --scale F (default 1: 20,000-job workloads),
 * --systems a,b (system or system:mode), --workloads a,b, --json (last stdout
 * line: latest.json's shape plus failures).
 *
 * Every (system, mode, workload, run) runs in a fresh process
 * (bench/peers/run-one.ts) with a fresh namespace, so no state or memory
 * carries over; systems are interleaved within each run so drift hits all of
 * them alike. Throughput is timed until the system's own store counts every
 * job completed; latency is taken between a producer process and a worker
 * process on CLOCK_MONOTONIC. Each run checks every job's effect and the
 * store's completed count; a run that loses or repeats a job is a failure,
 * not a number, and the harness exits 1 at the end if any run failed.
 *
 * Output: bench/results/compare-<time>.json (everything). Only a full run
 * (every system and workload, scale 1, at least 3 runs) also writes
 * bench/results/latest.json, docs/BENCHMARKS.md and docs/benchmarks.svg
 * (bench/report.ts); any other run's file is for its reader, not committed.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { isFullRun, parseArgs, selectFactories, USAGE, UsageError, type Options } from './compare-options.js';
import { commandLine, describeMachine, durabilityLines } from './machine.js';
import { METRICS, sizes, type RunArgs, type RunResult } from './peers/protocol.js';
import { REFERENCE, allFactories, factoryLabel, runsWorkload } from './peers/registry.js';
import type { PeerFactory, Workload } from './peers/types.js';
import {
  failedText,
  formatValue,
  headlineRow,
  medianText,
  rangeText,
  ratioCell,
  summarize,
  warningRows,
  COMPARE_FORMAT,
  type CompareResults,
  type Failure,
  type NotApplicable,
} from './report-rows.js';
import { latestJson, writePublished } from './report.js';
import { namespacesFor, runInChild } from './run-in-child.js';
import { codeRevision, formatTable, isInterrupted, progress, runCleanups } from './support.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const RESULTS_DIR = `${ROOT}bench/results`;

function summaryLine(r: RunResult): string {
  if (!r.ok) return `FAILED: ${(r.failure ?? 'unknown').split('\n')[0]}`;
  const values = METRICS.filter((m) => m.workload === r.workload && r.values[m.metric] !== undefined).map(
    (m) =>
      `${m.metric} ${formatValue(r.values[m.metric] ?? null, m.unit)}` +
      (m.unit === 'count' || m.unit === 'ratio' ? '' : ` ${m.unit}`),
  );
  const warned = r.warnings.length > 0 ? `; ${r.warnings.length} warning(s)` : '';
  return `${values.join(', ')}${warned}`;
}

/** What runs, in order: each (system, mode) that can run the workload; the others with why not. */
function plan(
  factories: readonly PeerFactory[],
  workloads: readonly Workload[],
): { runs: { factory: PeerFactory; workload: Workload }[]; notApplicable: NotApplicable[] } {
  const runs: { factory: PeerFactory; workload: Workload }[] = [];
  const notApplicable: NotApplicable[] = [];
  for (const workload of workloads) {
    for (const factory of factories) {
      const r = runsWorkload(factory, workload);
      if (r.runs) runs.push({ factory, workload });
      else notApplicable.push({ workload, system: factory.system, mode: factory.mode, note: r.note });
    }
  }
  return { runs, notApplicable };
}

async function measure(
  opts: Options,
  runs: readonly { factory: PeerFactory; workload: Workload }[],
): Promise<{ results: RunResult[]; failures: Failure[] }> {
  const results: RunResult[] = [];
  const failures: Failure[] = [];
  const total = runs.length * opts.runs;
  let done = 0;
  for (let run = 1; run <= opts.runs; run++) {
    for (const { factory, workload } of runs) {
      // SIGINT / SIGTERM: the cleanup handler is dropping what the last run made and will exit.
      if (isInterrupted()) await new Promise(() => undefined);
      done++;
      const args: RunArgs = {
        system: factory.system,
        mode: factory.mode,
        workload,
        run,
        scale: opts.scale,
        ns: namespacesFor(workload),
      };
      progress(`[${done}/${total}] run ${run}: ${workload} · ${factory.system} (${factory.mode})`);
      const r = await runInChild(factory, args);
      if (isInterrupted()) await new Promise(() => undefined);
      results.push(r);
      if (!r.ok)
        failures.push({ workload, system: factory.system, mode: factory.mode, run, reason: r.failure ?? 'unknown' });
      progress(`        ${summaryLine(r)}  (${(r.durationMs / 1000).toFixed(1)} s)`);
    }
  }
  return { results, failures };
}

function printSummary(compare: CompareResults): void {
  const ref = compare.reference;
  console.log(
    `\nlanewake side by side — median of ${compare.params.runs} run(s), scale ` +
      `${compare.params.scale}, code ${compare.revision}\n`,
  );
  console.log(
    formatTable(
      ['workload', 'system', 'mode', 'median', 'min–max', 'unit', 'runs failed', `vs ${ref.system} (${ref.mode})`],
      compare.rows.map((x) => [
        x.name,
        x.system,
        x.mode,
        medianText(x),
        rangeText(x),
        x.unit,
        failedText(x),
        ratioCell(x, ref),
      ]),
      ['left', 'left', 'left', 'right', 'right', 'left', 'right', 'left'],
    ),
  );
  if (compare.notApplicable.length > 0) {
    console.log('\nn/a:');
    for (const n of compare.notApplicable) console.log(`  ${n.workload} · ${n.system} (${n.mode}): ${n.note}`);
  }
  console.log('\nDurability of the servers:');
  for (const l of durabilityLines(compare.durability)) console.log(`  ${l}`);
  const headline = headlineRow(compare);
  if (headline)
    console.log(
      `\nHeadline latency (${ref.system} ${ref.mode}, producer and worker in two ` +
        `processes): p50 ${medianText(headline)} ms`,
    );
  const poll = compare.rows.find((x) => x.name === 'latency p50' && x.system === ref.system && x.mode === 'poll 5 s');
  if (poll?.ratio) console.log(`${ref.system} (${ref.mode}) latency p50 vs poll 5 s: ${poll.ratio.label}`);
  const warnings = warningRows(compare.results);
  if (warnings.length > 0) {
    console.log(`\n${warnings.length} warning(s) the systems printed:`);
    for (const w of warnings) console.log(`  ${w.system} (${w.mode}), ${w.where}: ${w.warning}`);
  }
  if (compare.failures.length > 0) {
    console.log(`\n${compare.failures.length} FAILED run(s):`);
    for (const f of compare.failures)
      console.log(`  run ${f.run} ${f.workload} · ${f.system} (${f.mode}): ${f.reason.split('\n')[0]}`);
  } else {
    console.log(
      '\nEffect check: every run started every job exactly once, and each store counted every job completed once.',
    );
  }
}

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  let opts: Options;
  let all: PeerFactory[];
  let factories: PeerFactory[];
  try {
    const parsed = parseArgs(argv);
    if (parsed === 'help') {
      console.log(USAGE);
      return 0;
    }
    opts = parsed;
    if (opts.systems === null || /lanewake/.test(opts.systems)) {
      // lanewake runs from its compiled package, as users run it (the peers run
      // their published JS); its adapter loads dist/, so build before loading it.
      progress('building dist/ (npm run build)');
      execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
    }
    all = await allFactories();
    factories = selectFactories(all, opts.systems);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(e.message);
      return 2;
    }
    throw e;
  }
  const full = isFullRun(opts, factories, all);
  const startedAt = new Date().toISOString();
  const { machine, software, durability: servers } = await describeMachine();
  progress(
    `lanewake compare: ${factories.map(factoryLabel).join(', ')}; workloads ` +
      `${opts.workloads.join(', ')}; ${opts.runs} run(s), scale ` +
      `${opts.scale}${full ? '' : ' (not a full run: the published results stay as they are)'}`,
  );
  progress(`machine: ${machine}`);
  for (const l of durabilityLines(servers)) progress(`durability: ${l}`);

  const { runs, notApplicable } = plan(factories, opts.workloads);
  const { results, failures } = await measure(opts, runs);
  const finishedAt = new Date().toISOString();
  const compare: CompareResults = {
    format: COMPARE_FORMAT,
    startedAt,
    finishedAt,
    command: commandLine(argv),
    machine,
    software,
    durability: servers,
    revision: codeRevision(['src', 'bench']),
    params: {
      runs: opts.runs,
      scale: opts.scale,
      systems: opts.systems === null ? null : factories.map(factoryLabel),
      workloads: opts.workloads,
    },
    full,
    sizes: sizes(opts.scale),
    reference: { ...REFERENCE },
    factories: factories.map((f) => ({
      system: f.system,
      mode: f.mode,
      workloads: [...f.workloads],
      notes: { ...f.notes },
      ordersByKey: f.ordersByKey,
    })),
    notApplicable,
    results,
    failures,
    rows: [],
  };
  compare.rows = summarize(compare);

  mkdirSync(RESULTS_DIR, { recursive: true });
  const resultFile = `bench/results/compare-${finishedAt.replace(/\.\d+Z$/, 'Z').replace(/:/g, '-')}.json`;
  writeFileSync(`${ROOT}${resultFile}`, `${JSON.stringify(compare, null, 2)}\n`);
  const published = full ? writePublished(compare, resultFile) : undefined;

  printSummary(compare);
  console.log(
    published
      ? `\nwrote ${resultFile}, ` +
          `${[published.latest, published.markdown, published.svg].map((p) => p.slice(ROOT.length)).join(', ')}`
      : `\nwrote ${resultFile} only (not a full run: latest.json and the benchmark page ` +
          `are left as they are; do not commit this file)`,
  );
  if (opts.json) console.log(JSON.stringify({ ...latestJson(compare, resultFile), failures }));
  return failures.length > 0 ? 1 : 0;
}

main()
  .then((code) => {
    process.exitCode = code;
  })
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(async () => {
    await runCleanups();
    // Peer client libraries loaded for the n/a notes and teardowns may keep handles open.
    process.exit(process.exitCode ?? 0);
  });
