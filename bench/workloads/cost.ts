/**
 * The ledger's cost per job (docs/BENCHMARKS.md, "Where each microsecond goes"), for enqueue, claim and complete
 * apart and for the whole engine (bench/workloads/cost-phases.ts): the SQL server's CPU (the whole server, and on
 * MariaDB the threads of the run's own sessions alone), its row counters (Handler_* on MariaDB/MySQL, TiDB's
 * statements_summary of the run's schema), the statements and round trips sent, and this process's CPU. Beside it,
 * graphile-worker tuned on PostgreSQL measured the same way in the same run (bench/workloads/cost-graphile.ts).
 *
 *   npm run bench:cost -- --scale 0.1 --runs 1
 *   npm run bench:cost -- --server tidb       # or mariadb, or a mysql:// URL; --txn optimistic on TiDB
 *   flags: --lanes L (default N/20), --claim-round R (544), --concurrency C (32), --variants laneless,laned,
 *          --no-single, --no-peer
 * Writes bench/results/cost-latest.json (MariaDB), cost-tidb-latest.json or cost-mysql-latest.json.
 */
import { SqlServerMeter } from '../cost-meter.js';
import { installRoundTripCounter } from '../sql-count.js';
import { cliFlag, fmt, median, onCleanup, progress, serverUrlOf, waitForQuiet } from '../support.js';
import { defineWorkload, numFlag, scaled, type Table } from '../workload.js';
import { graphileCost } from './cost-graphile.js';
import { type CostSettings, engine, type PhaseCost, type PhaseKey, pipeline, singleEnqueues } from './cost-phases.js';

const serverUrl = serverUrlOf(cliFlag('--server') ?? 'mariadb');
const txn = cliFlag('--txn');
if (txn !== undefined) process.env.LANEWAKE_BENCH_TIDB_TXN_MODE = txn;
const JOBS = Math.max(10, scaled(20_000));
const settings: CostSettings = {
  serverUrl,
  jobs: JOBS,
  lanes: numFlag('--lanes', Math.max(1, Math.round(JOBS / 20))),
  // A no-op consumer's full claim room: its slots (32) and its prefetch (512, src/consumer/options.ts).
  claimRound: numFlag('--claim-round', 544),
  concurrency: numFlag('--concurrency', 32),
};
const PEER = 'graphile-worker tuned';
type Variant = 'laneless' | 'laned' | typeof PEER;
const VARIANTS: Variant[] = [...(cliFlag('--variants') ?? 'laneless,laned').split(',')] as Variant[];
if (!process.argv.includes('--no-peer')) VARIANTS.push(PEER);

/** A phase of one run, per job (jobsPerS over its wall time). */
interface PerJob {
  jobsPerS: number;
  serverCpuUs?: number;
  serverCpuOwnUs?: number;
  workerCpuUs: number;
  roundTrips: number;
  statements: number;
  rowsRead?: number;
  rowsWritten?: number;
}
/** A run's rows, by phase label. */
type Result = Record<string, PerJob>;

const READS = ['first', 'key', 'last', 'next', 'prev', 'rnd', 'rnd_next'].map((k) => `Handler_read_${k}`);
const WRITES = ['Handler_write', 'Handler_update', 'Handler_delete'];

function perJob(c: PhaseCost): PerJob {
  const n = Math.max(1, c.jobs);
  const sum = (names: readonly string[]): number | undefined =>
    c.counters === undefined ? undefined : names.reduce((t, k) => t + (c.counters?.[k] ?? 0), 0) / n;
  const tidb = meter?.server.family === 'tidb';
  return {
    jobsPerS: (c.jobs / c.wallMs) * 1000,
    ...(c.serverCpuUs !== undefined ? { serverCpuUs: c.serverCpuUs / n } : {}),
    ...(c.serverCpuOwnUs !== undefined ? { serverCpuOwnUs: c.serverCpuOwnUs / n } : {}),
    ...{ workerCpuUs: c.workerCpuUs / n, roundTrips: c.roundTrips / n, statements: c.statements / n },
    ...{ rowsRead: sum(tidb ? ['TOTAL_KEYS'] : READS), rowsWritten: sum(tidb ? ['AFFECTED_ROWS'] : WRITES) },
  };
}

/** Phases one after the other over the same jobs: per-job figures add up. */
function sum(parts: readonly PerJob[]): PerJob {
  const add = (pick: (p: PerJob) => number | undefined): number | undefined =>
    parts.some((p) => pick(p) === undefined) ? undefined : parts.reduce((t, p) => t + pick(p)!, 0);
  const fields = ['serverCpuUs', 'serverCpuOwnUs', 'rowsRead', 'rowsWritten'] as const;
  return {
    ...Object.fromEntries(fields.map((f) => [f, add((p) => p[f])])),
    jobsPerS: 1 / parts.reduce((t, p) => t + 1 / p.jobsPerS, 0),
    ...{ workerCpuUs: add((p) => p.workerCpuUs)!, roundTrips: add((p) => p.roundTrips)! },
    statements: add((p) => p.statements)!,
  };
}

const LABELS: Record<PhaseKey, (v: Variant) => string> = {
  enqueueBatch: () => 'enqueue, `enqueueMany` × 500',
  enqueueSingle: () => 'enqueue, one `enqueue` per item',
  claim: () => `claim, rounds of ≤ ${settings.claimRound}`,
  complete: (v) => `complete, \`completeMany\` × ${v === 'laned' ? 128 : 500}`,
  engineEnqueue: () => "engine: producer's batches",
  engineDrain: () => `engine: consumer drains (c = ${settings.concurrency})`,
};

let meter: SqlServerMeter | undefined;

async function measure(v: Variant): Promise<Result> {
  const m = meter!;
  await waitForQuiet(2000); // not in the middle of someone else's burst on a shared machine
  if (v === PEER) {
    const peer = await graphileCost(JOBS, settings.concurrency);
    const [enqueue, processing] = [perJob(peer.enqueue), perJob(peer.process)];
    return { enqueue, process: processing, '**enqueue + process**': sum([enqueue, processing]) };
  }
  const phases = {
    ...(await pipeline(settings, m, v)),
    ...(process.argv.includes('--no-single') ? {} : await singleEnqueues(settings, m, v)),
    ...(await engine(settings, m, v)),
  };
  const rows: Result = {};
  for (const [key, label] of Object.entries(LABELS) as [PhaseKey, (v: Variant) => string][]) {
    const cost = phases[key];
    if (cost !== undefined) rows[label(v)] = perJob(cost);
  }
  rows['**engine: enqueue + drain**'] = sum([rows[LABELS.engineEnqueue(v)]!, rows[LABELS.engineDrain(v)]!]);
  return rows;
}

const num = (v: number | undefined): string => {
  if (v === undefined || !Number.isFinite(v)) return '—';
  const a = Math.abs(v);
  return fmt(v, a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : a === 0 ? 0 : 3);
};

function report(of: (v: Variant) => Result[], runs: number): Table[] {
  const s = meter!.server;
  const name = s.family === 'tidb' ? 'TiDB' : s.family === 'mariadb' ? 'MariaDB' : 'MySQL';
  const columns: [string, (p: PerJob) => number | undefined][] = [
    [
      `${s.family === 'tidb' ? 'tidb-server' : s.family === 'mariadb' ? 'mariadbd' : 'mysqld'} µs/job`,
      (p) => p.serverCpuUs,
    ],
    ['its sessions', (p) => p.serverCpuOwnUs],
    ['node µs/job', (p) => p.workerCpuUs],
    ['round trips/job', (p) => p.roundTrips],
    ['statements/job', (p) => p.statements],
    ['rows read', (p) => p.rowsRead],
    ['rows written', (p) => p.rowsWritten],
    ['jobs/s', (p) => p.jobsPerS],
  ];
  const med = (rs: Result[], label: string, pick: (p: PerJob) => number | undefined): number | undefined => {
    const known = rs.map((r) => r[label]).map((p) => (p === undefined ? undefined : pick(p)));
    const values = known.filter((x): x is number => x !== undefined && Number.isFinite(x));
    return values.length === 0 ? undefined : median(values);
  };
  return [
    {
      title:
        `cost per job — ${name} ${s.version.split('-')[0]} (${s.url}), median of ${runs} run(s): ${fmt(JOBS)} jobs, ` +
        `laned over ${fmt(settings.lanes)} lanes` +
        (VARIANTS.includes(PEER) ? "; the peer's server CPU: every postgres process" : ''),
      headers: ['variant', 'phase', ...columns.map(([h]) => h)],
      rows: VARIANTS.flatMap((v) =>
        Object.keys(of(v)[0] ?? {}).map((label) => [
          v,
          label,
          ...columns.map(([, pick]) => num(med(of(v), label, pick))),
        ]),
      ),
      align: ['left', 'left', ...columns.map((): 'right' => 'right')],
    },
  ];
}

export default defineWorkload<Variant, Result>({
  about: "the SQL server's and node's CPU, rows, statements and round trips per job, enqueue, claim, complete apart",
  variants: VARIANTS,
  label: (v) => v,
  setup: async () => {
    installRoundTripCounter();
    const m = await SqlServerMeter.open(settings.serverUrl);
    meter = m;
    onCleanup(() => m.close());
    if (m.server.pid === undefined) progress(`the server's process is not on this machine: no server CPU`);
  },
  measure,
  line: (_, r) =>
    Object.entries(r)
      .filter(([label]) => label.startsWith('**'))
      .map(([label, p]) => `${label}: server ${num(p.serverCpuUs)} µs, node ${num(p.workerCpuUs)} µs per job`)
      .join('; '),
  report,
  save: true,
  resultName: () => (meter?.server.family === 'mariadb' ? 'cost' : `cost-${meter?.server.family}`),
});
