/**
 * What network distance to the SQL server costs (issue 15 §4): the engine
 * benchmark's workloads through a Toxiproxy in front of MariaDB and, when it
 * answers, TiDB, with latency added to every round trip.
 *
 *   npm run bench:latency                       # 3 runs a cell, full sizes (~10 min)
 *   npm run bench:latency -- --quick            # smoke: 1 run, small sizes
 *   npm run bench:latency -- --servers mariadb --latencies 0,1 --runs 1
 *
 * Per server and added latency per direction (`--latencies`, default
 * direct,0,0.5,1,2 on MariaDB and 0,0.5,1,2 on TiDB; `direct` is the
 * server's own port, no proxy):
 *   bulk      N no-op jobs pre-enqueued, one consumer at concurrency 64: jobs/s
 *             (bench/engine.ts throughput);
 *   latency   jobs enqueued one by one at a steady rate into an idle consumer:
 *             enqueue→handler-start p50/p99, twice: the producer in the
 *             consumer's process and wake channel (bench/engine.ts latency:
 *             the job is inserted already claimed), and the producer with its
 *             own pool and wake channel, as another process (the job crosses
 *             the Redis stream, then is claimed).
 * Each ledger call of the one-job path timed alone on each server (bench/ledger-calls.ts).
 * Round trips per job by phase come from bench/cost.ts.
 * Redis is not behind the proxy. Results: bench/results/latency-latest.json.
 */
import { availableParallelism, cpus, totalmem } from 'node:os';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { latency, throughput } from './engine.js';
import { ledgerCallTimes, type CallTimes } from './ledger-calls.js';
import { addedLatency, LatencyProxies, pingRoundTrip, type AddedLatency } from './latency-proxy.js';
import { printCallTimes, printCells, type Cell } from './latency-report.js';
import { installRoundTripCounter, setPhase, takePhase, totalsByKind } from './sql-count.js';
import {
  cliFlag,
  codeRevision,
  cpuSample,
  cpuShare,
  median,
  onCleanup,
  percentile,
  progress,
  runBenchmark,
  withAdmin,
} from './support.js';

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => cliFlag(name, args);
const QUICK = args.includes('--quick');
const RUNS = Number(flag('--runs') ?? (QUICK ? 1 : 3));
const SIZES = {
  bulkJobs: Number(flag('--bulk') ?? (QUICK ? 2_000 : 20_000)),
  latencyJobs: Number(flag('--latency-jobs') ?? (QUICK ? 60 : 400)),
  callJobs: QUICK ? 20 : 100,
  ratePerS: 100,
};
const LATENCY_FLAG = flag('--latencies');
/**
 * Cells per server. `direct` (no proxy) only on MariaDB by default: a TiDB database takes ~5 s to migrate, three a
 * cell.
 */
const latenciesFor = (server: string): AddedLatency[] =>
  (LATENCY_FLAG ?? (server === 'mariadb' ? 'direct,0,0.5,1,2' : '0,0.5,1,2')).split(',').map(addedLatency);
const WANT_SERVERS = (flag('--servers') ?? 'mariadb,tidb').split(',');
const OUT =
  flag('--out') ?? (QUICK ? undefined : fileURLToPath(new URL('./results/latency-latest.json', import.meta.url)));
/** The issue's goal at 1 ms added per direction. */
const GOAL = { latencyLabel: '1', bulkJobsS: 8_000, p50Ms: 6 };

interface Server {
  name: string;
  url: string;
  version: string;
  proxyUrl: string;
}

const SERVER_URLS: Record<string, string> = {
  mariadb: (process.env.LANEWAKE_BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306').replace(/\/+$/, ''),
  tidb: (process.env.LANEWAKE_BENCH_TIDB_URL ?? 'mysql://root@127.0.0.1:4000').replace(/\/+$/, ''),
};

async function serverVersion(url: string): Promise<string | undefined> {
  try {
    return await withAdmin(async (c) => {
      const [rows] = await c.query('SELECT VERSION() AS v');
      return String((rows as { v: string }[])[0]?.v ?? '');
    }, url);
  } catch {
    return undefined;
  }
}

/** Runs `fn` with its round trips counted; returns its value and them, per kind. */
async function counted<T>(
  id: string,
  fn: () => Promise<T>,
): Promise<{ value: T; roundTrips: ReturnType<typeof totalsByKind> }> {
  setPhase(id);
  try {
    const value = await fn();
    return { value, roundTrips: totalsByKind(takePhase(id)) };
  } finally {
    takePhase(id);
    setPhase('idle');
  }
}

async function runCell(server: Server, l: AddedLatency, cell: Cell, proxies: LatencyProxies): Promise<void> {
  const url = l.direct ? server.url : server.proxyUrl;
  if (!l.direct) await proxies.set(server.name, l);
  const at = l.direct ? `${server.name} direct` : `${server.name} +${l.label} ms`;
  const cpu0 = cpuSample();
  const t0 = performance.now();
  const b = await counted('bulk', () => throughput(64, SIZES.bulkJobs, url));
  cell.bulkJobsS.push(b.value.jobsS);
  cell.bulkRoundTrips.push(b.roundTrips);
  const t1 = performance.now();
  const same = await latency({ redis: true }, SIZES.latencyJobs, SIZES.ratePerS, url);
  cell.sameP50.push(percentile(same, 50));
  cell.sameP99.push(percentile(same, 99));
  const t2 = performance.now();
  const own = await latency({ redis: true, remoteProducer: true }, SIZES.latencyJobs, SIZES.ratePerS, url);
  cell.redisP50.push(percentile(own, 50));
  cell.redisP99.push(percentile(own, 99));
  cell.machineBusyPct.push(cpuShare(cpu0).machineBusyPct ?? Number.NaN);
  const sec = (a: number, z: number): string => ((z - a) / 1000).toFixed(1);
  progress(
    `  ${at}: bulk ${Math.round(b.value.jobsS)} jobs/s (${sec(t0, t1)} s); p50 ` +
      `${percentile(same, 50).toFixed(2)} ms same process (${sec(t1, t2)} s), ` +
      `${percentile(own, 50).toFixed(2)} ms own producer ` +
      `(${sec(t2, performance.now())} s)`,
  );
}

async function main(): Promise<void> {
  installRoundTripCounter();
  const startedAt = performance.now();
  const proxies = await LatencyProxies.start();
  // Registered first, so it runs last: the databases are dropped through it.
  onCleanup(() => proxies.stop());
  const servers: Server[] = [];
  for (const name of WANT_SERVERS) {
    const url = SERVER_URLS[name];
    if (url === undefined) throw new Error(`--servers: unknown server ${name} (mariadb, tidb)`);
    const version = await serverVersion(url);
    if (version === undefined) {
      progress(`${name} at ${url} does not answer: left out`);
      continue;
    }
    servers.push({ name, url, version, proxyUrl: await proxies.add(name, url) });
  }
  if (servers.length === 0) throw new Error('no server answers');
  progress(
    `toxiproxy ${proxies.version}; servers: ` +
      `${servers.map((s) => `${s.name} ${s.version}`).join(', ')}; ${RUNS} run(s) a ` +
      `cell`,
  );

  const cells: Cell[] = [];
  for (const s of servers) {
    for (const l of latenciesFor(s.name)) {
      if (!l.direct) await proxies.set(s.name, l);
      setPhase('calibration');
      const ping = await pingRoundTrip(l.direct ? s.url : s.proxyUrl, 200);
      takePhase('calibration');
      cells.push({
        server: s.name,
        latency: l,
        bulkJobs: SIZES.bulkJobs,
        pingP50Ms: ping.p50,
        pingP99Ms: ping.p99,
        bulkJobsS: [],
        bulkRoundTrips: [],
        sameP50: [],
        sameP99: [],
        redisP50: [],
        redisP99: [],
        machineBusyPct: [],
      });
    }
  }
  // A fresh process runs its first few thousand jobs cold (V8 warm-up): not in the first cell's figures.
  const first = servers[0]!;
  progress(`warm-up: ${Math.min(SIZES.bulkJobs, 4_000)} jobs on ${first.name}, not measured`);
  await counted('warm-up', () => throughput(64, Math.min(SIZES.bulkJobs, 4_000), first.url));
  const callTimes: { server: string; times: CallTimes }[] = [];
  for (const s of servers) {
    progress(`ledger calls one at a time: ${s.name}, ${SIZES.callJobs} jobs, direct`);
    callTimes.push({
      server: s.name,
      times: (await counted('calls', () => ledgerCallTimes(s.url, SIZES.callJobs))).value,
    });
  }
  // Cells interleaved within each run, so machine noise falls on all of them alike.
  for (let run = 1; run <= RUNS; run++) {
    progress(`run ${run}/${RUNS}`);
    for (const cell of cells) await runCell(servers.find((s) => s.name === cell.server)!, cell.latency, cell, proxies);
  }

  const minutes = (performance.now() - startedAt) / 60_000;

  const title =
    `lanewake through a latency proxy — median of ${RUNS} run(s) a cell; bulk ` +
    `${SIZES.bulkJobs} jobs at concurrency 64; latency ${SIZES.latencyJobs} jobs at ` +
    `${SIZES.ratePerS}/s`;
  const goal = printCells(title, cells, GOAL);
  printCallTimes(
    `ledger calls of the one-job path, one at a time, on each server's own port: median ms of ${SIZES.callJobs}`,
    callTimes,
  );
  progress(`\n${minutes.toFixed(1)} min in all`);

  if (OUT === undefined) return;
  mkdirSync(dirname(OUT), { recursive: true });
  const cpu = cpus()[0]?.model ?? 'unknown';
  const meta = {
    at: new Date().toISOString(),
    command: `npm run bench:latency${args.length > 0 ? ` -- ${args.join(' ')}` : ''}`,
    code: codeRevision(['src', 'bench']),
    minutes: Math.round(minutes * 10) / 10,
    runs: RUNS,
    sizes: SIZES,
    machine: {
      cpu,
      cores: availableParallelism(),
      memGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
      node: process.version,
      shared: true,
    },
    servers: servers.map((s) => ({ name: s.name, version: s.version })),
    toxiproxy: proxies.version,
    notes: [
      'Toxiproxy latency toxics (jitter 0) on the SQL connection only; Redis is direct.',
      '0.5 ms per direction is 1 ms upstream + 0 downstream (Toxiproxy adds whole ms): ' +
        'the same 1 ms on every round trip.',
      'TiDB is one standalone tidb-server on unistore (in-process storage): no PD, no ' +
        'TiKV, no network inside the cluster.',
    ],
  };
  const out = {
    meta,
    goal,
    ledgerCallsMs: callTimes.map((c) => ({
      server: c.server,
      ...Object.fromEntries(Object.entries(c.times).map(([k, v]) => [k, round(v)])),
    })),
    cells: cells.map((c) => ({
      server: c.server,
      latencyPerDirectionMs: c.latency.label,
      upMs: c.latency.upMs,
      downMs: c.latency.downMs,
      pingP50Ms: round(c.pingP50Ms),
      pingP99Ms: round(c.pingP99Ms),
      bulkJobsS: { median: Math.round(median(c.bulkJobsS)), values: c.bulkJobsS.map(Math.round) },
      sameProcess: {
        p50Ms: round(median(c.sameP50)),
        p99Ms: round(median(c.sameP99)),
        p50Values: c.sameP50.map(round),
        p99Values: c.sameP99.map(round),
      },
      ownProducer: {
        p50Ms: round(median(c.redisP50)),
        p99Ms: round(median(c.redisP99)),
        p50Values: c.redisP50.map(round),
        p99Values: c.redisP99.map(round),
      },
      bulkRoundTripsPerRun: c.bulkRoundTrips,
      machineBusyPctPerRun: c.machineBusyPct.map((v) => Math.round(v)),
    })),
  };
  writeFileSync(OUT, `${JSON.stringify(out, null, 2)}\n`);
  progress(`wrote ${OUT}`);
}

function round(n: number): number {
  return Math.round(n * 1000) / 1000;
}

runBenchmark(main);
