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
 *
 * This file is the CLI and the report; the runs are in ledger-throughput.ts
 * and ledger-latency.ts, what they share in ledger-fixtures.ts.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { RowDataPacket } from 'mysql2/promise';
import {
  benchServerUrl,
  codeRevision,
  fmt,
  isInterrupted,
  median,
  minMax,
  nowMs,
  printTable,
  progress,
  runCleanups,
  withAdmin,
} from './support.js';
import {
  CLAIM_LIMIT,
  DEEP_LANE_BATCH,
  ENQUEUE_BATCH,
  SHARED_LANES,
  attempt,
  sizes,
  type RunOutcome,
} from './ledger-fixtures.js';
import { COMPLETE_PROBES, benchLatency, type LatencyRun } from './ledger-latency.js';
import { benchClaimComplete, benchEnqueue } from './ledger-throughput.js';

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
  for (const s of values.only
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '')) {
    if (!(SCENARIOS as readonly string[]).includes(s))
      throw new Error(`--only: unknown scenario ${s} (${SCENARIOS.join(', ')})`);
    only.add(s as Scenario);
  }
  return { runs, scale, json: values.json, claimers, only };
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

function summarize(m: Metric): {
  median: number | null;
  min: number;
  max: number;
  failed: number;
  otherPct: number | undefined;
} {
  const okRuns = m.runs.filter((r): r is Extract<RunOutcome<number>, { ok: true }> => r.ok);
  const ok = okRuns.map((r) => r.value);
  const failed = m.runs.length - ok.length;
  const { min, max } = minMax(ok);
  const others = okRuns.map((r) => r.cpu?.otherPct).filter((x): x is number => x !== undefined);
  return {
    median: failed === 0 && ok.length > 0 ? median(ok) : null,
    min,
    max,
    failed,
    otherPct: others.length > 0 ? median(others) : undefined,
  };
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
        'SELECT VERSION() AS v, @@innodb_flush_log_at_trx_commit AS f, ' +
          '@@innodb_buffer_pool_size AS bp, @@log_bin AS lb',
      );
      const r = rows[0];
      if (!r) return 'unknown server';
      return (
        `${String(r.v)} (innodb_flush_log_at_trx_commit=${String(r.f)}, buffer pool ` +
        `${Math.round(Number(r.bp) / 2 ** 20)} MiB, log_bin=${String(r.lb)})`
      );
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
    `runs ${opts.runs}, scale ${opts.scale}: enqueue ${fmt(sz.enqueueItems)}, ` +
      `claim+complete ${fmt(sz.claimItems)} with ${opts.claimers} claimers, ` +
      `latency ${fmt(sz.latencySamples)} claims over ${fmt(sz.latencyHeads)} heads, deep lane ${fmt(sz.deepLaneItems)}`,
  );
  const started = nowMs();

  const metric = (label: string, unit: string, digits: number, target?: Metric['target']): Metric => ({
    label,
    unit,
    digits,
    runs: [],
    ...(target ? { target } : {}),
  });
  const deep = `a ${fmt(sz.deepLaneItems)}-item lane`;
  const m = {
    enqueueOwn: metric(`enqueue, own lanes (batches of ${ENQUEUE_BATCH})`, 'items/s', 0),
    enqueueShared: metric(`enqueue, ${fmt(SHARED_LANES)} shared lanes (batches of ${ENQUEUE_BATCH})`, 'items/s', 0),
    enqueueDeep: metric(`enqueue, one lane (batches of ${fmt(DEEP_LANE_BATCH)}; deep-lane setup)`, 'items/s', 0),
    ccOwn: metric(`claim+complete, own lanes (${opts.claimers} claimers × limit ${CLAIM_LIMIT})`, 'items/s', 0, {
      op: '≥',
      value: TARGETS.claimCompleteOwn,
    }),
    ccShared: metric(`claim+complete, ${fmt(SHARED_LANES)} shared lanes`, 'items/s', 0, {
      op: '≥',
      value: TARGETS.claimCompleteShared,
    }),
    p50: metric('claim(limit 1) p50, no deep lane', 'ms', 2),
    p99: metric('claim(limit 1) p99, no deep lane', 'ms', 2),
    deepP50: metric(`claim(limit 1) p50, with ${deep}`, 'ms', 2),
    deepP99: metric(`claim(limit 1) p99, with ${deep}`, 'ms', 2),
    completeShort: metric(`complete() of a lane head, short lane (p50 of ${COMPLETE_PROBES}; info)`, 'ms', 2),
    completeDeep: metric(`complete() of the deep lane's head (p50 of ${COMPLETE_PROBES}; info)`, 'ms', 2),
    ratio: metric('deep-lane claim ratio (p50 with / without)', '×', 2, { op: '≤', value: TARGETS.deepLaneRatio }),
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
    progress(
      `  run ${run} ${what}: ` +
        `${outcome.ok ? `${fmt(outcome.value, metric.digits)} ${metric.unit} — ${outcome.note}` : outcome.error}`,
    );
  };

  for (let run = 1; run <= opts.runs; run++) {
    progress(`run ${run}/${opts.runs} (${((nowMs() - started) / 1000).toFixed(0)} s elapsed)`);
    if (opts.only.has('enqueue')) {
      record(run, 'enqueue own', m.enqueueOwn, await attempt(() => benchEnqueue(sz.enqueueItems, null)));
      record(run, 'enqueue shared', m.enqueueShared, await attempt(() => benchEnqueue(sz.enqueueItems, SHARED_LANES)));
    }
    for (const [scenario, lanes, metricOf] of [
      ['own', null, m.ccOwn],
      ['shared', SHARED_LANES, m.ccShared],
    ] as const) {
      if (!opts.only.has(scenario)) continue;
      const outcome = await attempt(() => benchClaimComplete(sz.claimItems, lanes, opts.claimers));
      record(run, `claim+complete ${scenario}`, metricOf, outcome);
    }
    if (opts.only.has('latency')) {
      const lat = await attempt(() => benchLatency(sz));
      const part = (f: (v: LatencyRun) => number): RunOutcome<number> =>
        lat.ok
          ? { ok: true, value: f(lat.value), note: lat.note, ...(lat.cpu ? { cpu: lat.cpu } : {}) }
          : { ok: false, error: lat.error };
      const parts: [string, Metric, (v: LatencyRun) => number][] = [
        ['enqueue deep lane', m.enqueueDeep, (v) => v.deepEnqueueItemsS],
        ['claim p50', m.p50, (v) => v.p50],
        ['claim p99', m.p99, (v) => v.p99],
        ['claim p50 deep', m.deepP50, (v) => v.deepP50],
        ['claim p99 deep', m.deepP99, (v) => v.deepP99],
        ['complete short lane head', m.completeShort, (v) => v.completeLaneHeadP50],
        ['complete deep lane head', m.completeDeep, (v) => v.completeDeepHeadP50],
      ];
      for (const [what, metricOf, pick] of parts) record(run, what, metricOf, part(pick), false);
      const ratio = part((v) => v.ratio);
      if (lat.ok && ratio.ok) {
        const v = lat.value;
        ratio.note =
          `p50/p99 ${fmt(v.p50, 2)}/${fmt(v.p99, 2)} ms without, ` +
          `${fmt(v.deepP50, 2)}/${fmt(v.deepP99, 2)} ms with the deep lane; ${lat.note}; ` +
          `complete() of a lane head ${fmt(v.completeLaneHeadP50, 1)} ms short / ` +
          `${fmt(v.completeDeepHeadP50, 1)} ms deep`;
      }
      record(run, 'deep-lane claim ratio', m.ratio, ratio);
    }
  }
  const elapsedS = (nowMs() - started) / 1000;

  const order: Metric[] = [
    m.enqueueOwn,
    m.enqueueShared,
    m.enqueueDeep,
    m.ccOwn,
    m.ccShared,
    m.p50,
    m.p99,
    m.deepP50,
    m.deepP99,
    m.ratio,
    m.completeShort,
    m.completeDeep,
  ];
  const summary = new Map<Metric, ReturnType<typeof summarize>>(order.map((x) => [x, summarize(x)]));
  printTable(
    `lanewake ledger benchmark — code ${revision} — median of ${opts.runs} run(s), ` +
      `scale ${opts.scale}, ${elapsedS.toFixed(0)} s — ${server}`,
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
    `per run (CPU as % of one core over the timed part; ${availableParallelism()} ` +
      `cores, so ${availableParallelism() * 100}% is all of it; ` +
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
