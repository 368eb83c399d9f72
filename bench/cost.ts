/**
 * The ledger's cost per job, for enqueue, claim and complete apart, and for
 * the whole engine: the SQL server's CPU (its /proc stat; on MariaDB also the
 * threads of the run's own sessions alone, cost-proc.ts), its row counters
 * (MariaDB/MySQL SHOW GLOBAL STATUS Handler_* and Innodb_rows_*; TiDB's
 * statements_summary of the run's schema), the statements and round trips
 * sent (counted at the driver, bench/sql-count.ts), and this process's CPU.
 * Beside it, graphile-worker tuned on PostgreSQL measured the same way in the
 * same run: PostgreSQL's CPU per job over enqueue N, then process N.
 *
 *   npm run bench:cost                                  # = lanewake bench cost; MariaDB, 20,000 jobs, 3 runs
 *   npm run bench:cost -- --scale 0.1 --runs 1
 *   npm run bench:cost -- --server tidb                 # scripts/tidb.sh start: 127.0.0.1:4000
 *   npm run bench:cost -- --server mysql://root@127.0.0.1:3307
 *   flags: --lanes L (default N/20), --claim-round R (default 544), --concurrency C (32),
 *          --variants laneless,laned, --no-single, --no-peer, --txn optimistic (TiDB)
 *
 * Phases (bench/cost-lanewake.ts): enqueueMany in batches of 500, single
 * enqueues, claim rounds, batched completions (laned: in cycles, a lane shows
 * one head at a time), lane affinity (completions claiming the next heads),
 * and the engine: a producer's bulk enqueue and a no-op consumer draining it.
 * Every workload has a fresh database (dropped after); each phase is
 * measured alone, counters read just before and after it. Figures are
 * medians over the runs. The status counters and the whole server's CPU are
 * server-wide: the "others' statements" column says how many statements
 * other clients ran meanwhile, and "its sessions" is the CPU they cannot reach.
 * Output: the tables, and bench/results/cost-latest.json (MariaDB), cost-tidb-latest.json or cost-mysql-latest.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { graphileCost, type PeerCost } from './cost-graphile.js';
import {
  engine,
  laneAffinity,
  pipeline,
  singleEnqueues,
  type CostSettings,
  type PhaseCost,
  type PhaseKey,
  type Variant,
} from './cost-lanewake.js';
import { SqlServerMeter, type ServerFamily } from './cost-meter.js';
import {
  detailTable,
  engineCountsLine,
  mainTable,
  peerRows,
  peerTable,
  reportRows,
  sumCheckTable,
  type RunCosts,
} from './cost-report.js';
import { installRoundTripCounter } from './sql-count.js';
import { benchServerUrl, cliFlag, codeRevision, progress, runBenchmark, waitForQuiet } from './support.js';

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => cliFlag(`--${name}`, args);

function numberFlag(name: string, fallback: number, valid: (n: number) => boolean): number {
  const raw = flag(name);
  const n = raw === undefined ? fallback : Number(raw);
  if (!valid(n)) throw new Error(`--${name} ${raw}: out of range`);
  return n;
}

function serverUrlOf(server: string | undefined): string {
  if (server === undefined) return benchServerUrl();
  if (server === 'mariadb')
    return (process.env.LANEWAKE_BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306').replace(/\/+$/, '');
  if (server === 'tidb')
    return (process.env.LANEWAKE_BENCH_TIDB_URL ?? 'mysql://root@127.0.0.1:4000').replace(/\/+$/, '');
  if (/^(mysql|tidb):\/\//.test(server)) return server.replace(/^tidb:/, 'mysql:').replace(/\/+$/, '');
  throw new Error(`--server ${server}: use mariadb, tidb or a mysql:// URL`);
}

const SCALE = numberFlag('scale', 1, (n) => n > 0);
const RUNS = numberFlag('runs', 3, (n) => Number.isInteger(n) && n >= 1);
const JOBS = Math.max(10, Math.round(20_000 * SCALE));
const LANES = numberFlag('lanes', Math.max(1, Math.round(JOBS / 20)), (n) => Number.isInteger(n) && n >= 1);
// A no-op consumer's full claim room: its slots (32) and its prefetch (512, src/consumer/options.ts).
const CLAIM_ROUND = numberFlag('claim-round', 544, (n) => Number.isInteger(n) && n >= 1 && n <= 1000);
const CONCURRENCY = numberFlag('concurrency', 32, (n) => Number.isInteger(n) && n >= 1 && n <= 1000);
const VARIANTS = (flag('variants') ?? 'laneless,laned').split(',').map((v) => v.trim());
if (VARIANTS.some((v) => v !== 'laneless' && v !== 'laned')) throw new Error('--variants: laneless, laned or both');
const TXN = flag('txn');
if (TXN !== undefined && TXN !== 'pessimistic' && TXN !== 'optimistic')
  throw new Error('--txn is pessimistic or optimistic');

const settings: CostSettings = {
  serverUrl: serverUrlOf(flag('server')),
  redisUrl: process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379',
  jobs: JOBS,
  lanes: LANES,
  claimRound: CLAIM_ROUND,
  concurrency: CONCURRENCY,
  tidbTxnMode: TXN,
};

/** "MariaDB 10.11.19", "TiDB v8.5.4", "MySQL 8.0.40": the full version goes to the JSON. */
function shortServerName(family: ServerFamily, version: string): string {
  if (family === 'tidb') return `TiDB ${/TiDB-(v[0-9][^-\s]*)/.exec(version)?.[1] ?? version}`;
  return `${family === 'mariadb' ? 'MariaDB' : 'MySQL'} ${version.split('-')[0]}`;
}

/** A workload starts when the machine is not in someone else's burst (at most 2 s of waiting). */
async function quietly<T>(what: string, fn: () => Promise<T>): Promise<T> {
  await waitForQuiet(2000);
  progress(`  ${what}`);
  return fn();
}

async function oneRun(run: number, meter: SqlServerMeter): Promise<RunCosts> {
  const costs: RunCosts = { lanewake: {}, engineCounts: {}, peer: undefined };
  for (const variant of VARIANTS as Variant[]) {
    const tag = `${run}:${variant}`;
    const phases: Partial<Record<PhaseKey, PhaseCost>> = {};
    Object.assign(
      phases,
      await quietly(`${variant}: enqueue × 500, claim, complete`, () =>
        pipeline(settings, meter, variant, `${tag}:pipeline`),
      ),
    );
    if (!args.includes('--no-single')) {
      Object.assign(
        phases,
        await quietly(`${variant}: ${JOBS} single enqueues`, () =>
          singleEnqueues(settings, meter, variant, `${tag}:single`),
        ),
      );
    }
    if (variant === 'laned')
      Object.assign(
        phases,
        await quietly('laned: lane affinity', () => laneAffinity(settings, meter, `${tag}:affinity`)),
      );
    const e = await quietly(`${variant}: the engine (producer, consumer at concurrency ${CONCURRENCY})`, () =>
      engine(settings, meter, variant, `${tag}:engine`),
    );
    Object.assign(phases, e.phases);
    costs.lanewake[variant] = phases;
    costs.engineCounts[variant] = e.counts;
  }
  if (!args.includes('--no-peer'))
    costs.peer = await quietly('graphile-worker tuned on PostgreSQL', () => graphileCost(JOBS, CONCURRENCY));
  return costs;
}

runBenchmark(async () => {
  installRoundTripCounter();
  const meter = await SqlServerMeter.open(settings.serverUrl);
  try {
    const server = meter.server;
    const serverName = shortServerName(server.family, server.version);
    if (server.pid === undefined)
      progress(`the server's process is not on this machine (or not visible): no server CPU`);
    progress(`${serverName} at ${server.url}: ${JOBS} jobs (${LANES} lanes when laned), ${RUNS} run(s)`);
    const runs: RunCosts[] = [];
    for (let run = 1; run <= RUNS; run++) {
      progress(`run ${run}/${RUNS}`);
      runs.push(await oneRun(run, meter));
    }
    const labels = { claimRound: CLAIM_ROUND, concurrency: CONCURRENCY };
    const rows = reportRows(runs, server.family, labels);
    const peers = peerRows(runs, server.family, serverName);
    const peer: PeerCost | undefined = runs.find((r) => r.peer !== undefined)?.peer;
    const heading = `median of ${RUNS} run(s), scale ${SCALE}: ${JOBS} jobs, laned over ${LANES} lanes`;
    console.log(`\nlanewake ledger cost per job — ${serverName}, ${heading}\n`);
    console.log(mainTable(rows));
    console.log(
      server.family === 'tidb'
        ? '\nrows read: keys scanned, rows written: rows affected (statements_summary of ' +
            "the run's schema: EXEC_COUNT × TiDB's integer averages, so approximate)."
        : '\nrows read: Handler_read_* (every kind), rows written: Handler_write + ' +
            'Handler_update + Handler_delete; server-wide counters, less what reading them ' +
            'costs.',
    );
    if (server.family === 'tidb' && rows.every((r) => (r.median.rowsRead ?? 0) === 0)) {
      console.log(
        'No keys scanned in any phase: TiDB on unistore (scripts/tidb.sh) does not count them; on TiKV it does.',
      );
    }
    const shared = rows.filter((r) => (r.median.foreignStatements ?? 0) > 0 && !r.label.startsWith('='));
    if (shared.length > 0) {
      console.log(
        `${shared.length} phase(s) ran while other clients sent statements to the server ` +
          `("others' statements" below): their server CPU and Handler_* figures include ` +
          `that work.`,
      );
    }
    console.log(
      `server CPU: the whole server process; its sessions: the threads of this run's ` +
        `sessions alone (MariaDB), no other client's work and no background work. /proc ` +
        `ticks of 10 ms: ±${(10_000 / JOBS).toFixed(1)} µs/job per phase at ${JOBS} ` +
        `jobs. Worker CPU: this process, less what counting round trips took.`,
    );
    console.log(`\nserver counters per job — ${serverName}\n`);
    console.log(detailTable(rows, server.family));
    console.log(`\nthe parts beside the engine end to end, per job\n`);
    console.log(sumCheckTable(rows));
    console.log(
      "laned: engine ÷ parts with lane affinity, the engine's way of completing. The " +
        "engine's worker CPU includes its Redis wake-ups.",
    );
    for (const line of engineCountsLine(runs)) console.log(line);
    if (peers.length > 0) {
      const beside = peer ? ` beside ${peer.system} (${peer.mode}) on ${peer.server}` : '';
      console.log(`\nserver CPU per job${beside}: enqueue N, then process N (laneless)\n`);
      console.log(peerTable(peers));
      console.log(
        'PostgreSQL: the server is the postmaster and all its processes; its sessions ' +
          "are the backends of this process's connections.",
      );
    }
    const out = fileURLToPath(
      new URL(`./results/cost-${server.family === 'mariadb' ? '' : `${server.family}-`}latest.json`, import.meta.url),
    );
    mkdirSync(fileURLToPath(new URL('./results/', import.meta.url)), { recursive: true });
    const meta = {
      at: new Date().toISOString(),
      revision: codeRevision(['src', 'bench']),
      command: process.env.LANEWAKE_BENCH_COMMAND ?? `npm run bench:cost -- ${args.join(' ')}`.trim(),
      node: process.version,
      runs: RUNS,
      scale: SCALE,
      jobs: JOBS,
      lanes: LANES,
      claimRound: CLAIM_ROUND,
      concurrency: CONCURRENCY,
      servers: { ledger: { ...server, name: serverName }, peer: peer?.server ?? null },
    };
    writeFileSync(
      out,
      `${JSON.stringify({ meta, rows, peers, engineCounts: runs.map((r) => r.engineCounts), raw: runs }, null, 2)}\n`,
    );
    progress(`\nwrote ${out}`);
  } finally {
    await meter.close();
  }
});
