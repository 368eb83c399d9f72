/**
 * What network distance to the SQL server costs (docs/BENCHMARKS.md, "Latency proxy and TiDB"): a Toxiproxy in front
 * of MariaDB and, when it answers, TiDB, a `latency` toxic on each direction; per server and added latency per
 * direction (`--latencies`, default direct,0,0.5,1,2 on MariaDB, 0,0.5,1,2 on TiDB; `direct` is the server's own
 * port): a bulk drain at concurrency 64, and jobs one at a time at 100/s with the producer in the consumer's process
 * and in a pool and wake channel of its own. Redis is not behind the proxy. Each ledger call of the one-job path is
 * timed alone on each server's own port. `--quick`: one run, small sizes.
 */
import {
  cliFlag,
  cpuSample,
  cpuShare,
  fmt,
  median,
  minMax,
  onCleanup,
  percentile,
  progress,
  serverUrlOf,
  withAdmin,
} from '../support.js';
import { defineWorkload, scaled, type Table } from '../workload.js';
import { addedLatency, LatencyProxies, pingRoundTrip, type AddedLatency } from './latency-proxy.js';
import { arrivals, CALLS, type CallTimes, ledgerCallTimes, throughput } from './latency-paths.js';

const QUICK = process.argv.includes('--quick');
const BULK = QUICK ? 2_000 : scaled(20_000);
const ARRIVALS = QUICK ? 60 : Math.max(60, scaled(400));
const RATE = 100;
const CALL_JOBS = QUICK ? 20 : 100;
/** The issue's goal at 1 ms added per direction. */
const GOAL = { latency: '1', bulkJobsS: 8_000, p50Ms: 6 };
interface Cell {
  server: string;
  url: string;
  latency: AddedLatency;
  /** `SELECT 1` on one connection through the cell's path. */
  pingP50Ms: number;
}
interface Result {
  bulkJobsS: number;
  same: { p50: number; p99: number };
  own: { p50: number; p99: number };
  /** The whole machine's busy share (all cores, every process) during the cell. */
  machineBusyPct: number;
}

const cells: Cell[] = [];
const calls: { server: string; times: CallTimes }[] = [];
let proxies: LatencyProxies | undefined;

async function serverVersion(url: string): Promise<string | undefined> {
  return withAdmin(async (c) => {
    const [rows] = await c.query('SELECT VERSION() AS v');
    return String((rows as { v: string }[])[0]?.v ?? '');
  }, url).catch(() => undefined);
}

async function setup(): Promise<void> {
  const p = await LatencyProxies.start();
  proxies = p;
  onCleanup(() => p.stop()); // registered first, so it runs last: the databases are dropped through it
  for (const server of (cliFlag('--servers') ?? 'mariadb,tidb').split(',')) {
    const url = serverUrlOf(server);
    const version = await serverVersion(url);
    if (version === undefined) {
      progress(`${server} at ${url} does not answer: left out`);
      continue;
    }
    const proxyUrl = await p.add(server, url);
    progress(`${server} ${version} behind toxiproxy ${p.version}`);
    const latencies = cliFlag('--latencies') ?? (server === 'mariadb' ? 'direct,0,0.5,1,2' : '0,0.5,1,2');
    for (const latency of latencies.split(',').map(addedLatency)) {
      if (!latency.direct) await p.set(server, latency);
      const cellUrl = latency.direct ? url : proxyUrl;
      cells.push({ server, url: cellUrl, latency, pingP50Ms: (await pingRoundTrip(cellUrl, 200)).p50 });
    }
    progress(`ledger calls one at a time: ${server}, ${CALL_JOBS} jobs, direct`);
    calls.push({ server, times: await ledgerCallTimes(url, CALL_JOBS) });
  }
  if (cells.length === 0) throw new Error('no server answers');
  // A fresh process runs its first few thousand jobs cold (V8 warm-up): not in the first cell's figures.
  await throughput(64, Math.min(BULK, 4_000), serverUrlOf(cells[0]!.server));
}

async function measure(cell: Cell): Promise<Result> {
  if (!cell.latency.direct) await proxies?.set(cell.server, cell.latency);
  const cpu0 = cpuSample();
  const bulkJobsS = await throughput(64, BULK, cell.url);
  const same = await arrivals(false, ARRIVALS, RATE, cell.url);
  const own = await arrivals(true, ARRIVALS, RATE, cell.url);
  const tail = (l: number[]): Result['same'] => ({ p50: percentile(l, 50), p99: percentile(l, 99) });
  return { bulkJobsS, same: tail(same), own: tail(own), machineBusyPct: cpuShare(cpu0).machineBusyPct ?? Number.NaN };
}

const label = (c: Cell): string => {
  const { direct, label: l, upMs, downMs } = c.latency;
  const split = upMs !== downMs ? ` (${upMs} up, ${downMs} down)` : '';
  return `${c.server} ${direct ? 'direct (no proxy)' : `${l} ms${split}`}`;
};

function report(of: (c: Cell) => Result[], runs: number): Table[] {
  const med = (c: Cell, f: (r: Result) => number): number => median(of(c).map(f));
  const ms = (c: Cell, f: (r: Result) => number): string => fmt(med(c, f), 2);
  const goal = cells.filter((c) => !c.latency.direct && c.latency.label === GOAL.latency);
  const yes = (b: boolean): string => (b ? 'reached' : 'NOT reached');
  return [
    {
      title:
        `lanewake through a latency proxy — median of ${runs} run(s) a cell; bulk ${fmt(BULK)} jobs at ` +
        `concurrency 64; latency ${ARRIVALS} jobs at ${RATE}/s`,
      headers: ['server', 'SELECT 1 p50', 'bulk jobs/s', 'min–max', 'p50 same process', 'p99'].concat([
        'p50 own producer',
        'p99',
        'machine busy',
      ]),
      rows: cells.map((c) => {
        const { min, max } = minMax(of(c).map((r) => r.bulkJobsS));
        return [label(c), `${fmt(c.pingP50Ms, 2)} ms`, fmt(med(c, (r) => r.bulkJobsS)), `${fmt(min)}–${fmt(max)}`]
          .concat([ms(c, (r) => r.same.p50), ms(c, (r) => r.same.p99), ms(c, (r) => r.own.p50)])
          .concat([ms(c, (r) => r.own.p99), `${fmt(med(c, (r) => r.machineBusyPct))}%`]);
      }),
      align: ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    },
    {
      title: `ledger calls of the one-job path, one at a time, on each server's own port: median ms of ${CALL_JOBS}`,
      headers: ['server', ...CALLS],
      rows: calls.map((c) => [c.server, ...CALLS.map((k) => fmt(c.times[k], 2))]),
      align: ['left', ...CALLS.map((): 'right' => 'right')],
    },
    {
      title: `goal at ${GOAL.latency} ms per direction: bulk ≥ ${fmt(GOAL.bulkJobsS)} jobs/s, p50 ≤ ${GOAL.p50Ms} ms`,
      headers: ['server', 'bulk', 'p50 same process', 'p50 own producer'],
      rows: goal.map((c) => [
        c.server,
        yes(med(c, (r) => r.bulkJobsS) >= GOAL.bulkJobsS),
        yes(med(c, (r) => r.same.p50) <= GOAL.p50Ms),
        yes(med(c, (r) => r.own.p50) <= GOAL.p50Ms),
      ]),
    },
  ];
}

export default defineWorkload<Cell, Result>({
  about: 'bulk and enqueue→start latency through a latency proxy to MariaDB and TiDB; ledger calls timed alone',
  variants: cells,
  label,
  runs: QUICK ? 1 : 3,
  setup,
  measure,
  line: (_, r) =>
    `bulk ${fmt(r.bulkJobsS)} jobs/s; p50 ${fmt(r.same.p50, 2)} ms same process, ${fmt(r.own.p50, 2)} ms own producer`,
  report,
});
