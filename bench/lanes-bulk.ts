/**
 * A backlog over many lanes: one producer enqueues N laned items in batches
 * (enqueueMany, 500 each), then W worker processes (bench/steady-worker.mjs:
 * a consumer alone in its process, each handler writing one effect in
 * ctx.transaction) run them. Reported per run: how long the enqueue took,
 * and the processing rate from the workers' start to the last effect, with
 * the statements over 100 ms from the server's slow log.
 *
 *   npx tsx bench/lanes-bulk.ts                                  # MariaDB, 10,000 items over 300 lanes, 3 workers
 *   npx tsx bench/lanes-bulk.ts --server tidb --txn optimistic --items 10000 --lanes 300 --workers 3 --runs 3
 *   (--no-build: use dist/ as it is)
 */
import { randomBytes } from 'node:crypto';
import type { RowDataPacket } from 'mysql2/promise';
import { Ledger } from '../src/ledger/ledger.js';
import { deleteKeys } from '../test/support/engine.js';
import { buildDist, slowStatements, steadyChild, steadyServer } from './steady-server.js';
import {
  childMessage,
  cliFlag,
  createBenchDatabase,
  median,
  onCleanup,
  progress,
  runBenchmark,
  serverCpuSecondsOf,
  withAdmin,
} from './support.js';

const args = process.argv.slice(2);
const flag = (name: string, dflt: string): string => cliFlag(`--${name}`, args) ?? dflt;
const { server, txn, serverUrl } = steadyServer(args);
const redisUrl = flag('redis', 'redis://127.0.0.1:6379');
const ITEMS = Number(flag('items', '10000'));
const LANES = Number(flag('lanes', '300'));
const WORKERS = Number(flag('workers', '3'));
const CONCURRENCY = Number(flag('concurrency', '16'));
const RUNS = Number(flag('runs', '1'));
const BATCH = 500;
const QUEUE = 'bulk-lanes';

interface RunFigures {
  enqueueS: number;
  processS: number;
  jobsPerS: number;
  /** CPU of the SQL server per job while the workers ran them (µs), when it runs on this machine. */
  serverCpuUs: number | undefined;
  slow: number;
}

async function effects(db: string): Promise<number> {
  const [rows] = await withAdmin(
    (c) => c.query<RowDataPacket[]>(`SELECT COUNT(*) AS n FROM \`${db}\`.effects`),
    serverUrl,
  );
  return Number(rows[0]?.n);
}

async function oneRun(): Promise<RunFigures> {
  const db = await createBenchDatabase('lwlb', serverUrl);
  const keyPrefix = `lwlb:${randomBytes(4).toString('hex')}:`;
  onCleanup(() => deleteKeys(redisUrl, keyPrefix));
  const mode = server === 'tidb' ? { tidbTxnMode: txn as 'pessimistic' | 'optimistic' } : {};
  const ledger = new Ledger({ url: db.url, poolSize: 4, ...mode });
  await ledger.migrate();
  await withAdmin(
    (c) =>
      c.query(
        `CREATE TABLE \`${db.name}\`.effects (item_id VARCHAR(32) PRIMARY KEY, lane ` +
          `VARCHAR(255), written_at DATETIME(6))`,
      ),
    serverUrl,
  );
  const from = new Date();
  const t0 = performance.now();
  for (let i = 0; i < ITEMS; i += BATCH) {
    const n = Math.min(BATCH, ITEMS - i);
    await ledger.enqueueMany(
      Array.from({ length: n }, (_, k) => ({
        queue: QUEUE,
        type: 'job',
        lane: `lane-${(i + k) % LANES}`,
        payload: { k: i + k, t: '0' },
      })),
    );
  }
  const enqueueS = (performance.now() - t0) / 1000;
  await ledger.close();
  const env = {
    LW_DATABASE_URL: db.url,
    LW_REDIS_URL: redisUrl,
    LW_KEY_PREFIX: keyPrefix,
    LW_QUEUE: QUEUE,
    LW_CONCURRENCY: String(CONCURRENCY),
    ...(server === 'tidb' ? { LW_TIDB_TXN_MODE: txn } : {}),
  };
  const workers = Array.from({ length: WORKERS }, () => steadyChild('./steady-worker.mjs', env));
  const t1 = performance.now();
  const cpuBefore = serverCpuSecondsOf(serverUrl);
  await Promise.all(workers.map((w) => childMessage(w, 'ready')));
  const deadline = Date.now() + 600_000;
  while ((await effects(db.name)) < ITEMS) {
    if (Date.now() > deadline) throw new Error(`not all ${ITEMS} jobs ran within 600 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const processS = (performance.now() - t1) / 1000;
  const cpuAfter = serverCpuSecondsOf(serverUrl);
  const serverCpuUs =
    cpuBefore !== undefined && cpuAfter !== undefined ? ((cpuAfter - cpuBefore) * 1e6) / ITEMS : undefined;
  const slow = await slowStatements(server, serverUrl, db.name, from, new Date());
  await Promise.all(
    workers.map((w) => {
      const f = childMessage(w, 'figures');
      w.send({ type: 'stop' });
      return f;
    }),
  );
  await db.drop();
  return { enqueueS, processS, jobsPerS: ITEMS / processS, serverCpuUs, slow: slow.reduce((n, s) => n + s.count, 0) };
}

runBenchmark(async () => {
  buildDist(args);
  const label = `${server}${server === 'tidb' ? ` ${txn}` : ''}`;
  progress(`${label}: ${ITEMS} items over ${LANES} lanes, ${WORKERS} workers x ${CONCURRENCY}, ${RUNS} run(s)`);
  const runs: RunFigures[] = [];
  for (let r = 0; r < RUNS; r++) {
    const f = await oneRun();
    runs.push(f);
    console.log(
      `run ${r + 1}: enqueued in ${f.enqueueS.toFixed(2)} s; processed in ` +
        `${f.processS.toFixed(2)} s (${f.jobsPerS.toFixed(0)} jobs/s, workers' start ` +
        `included); server CPU ${f.serverCpuUs?.toFixed(0) ?? '?'} µs/job; ${f.slow} ` +
        `statements over 100 ms`,
    );
  }
  const m = (pick: (f: RunFigures) => number, d = 2): string => median(runs.map(pick)).toFixed(d);
  console.log(`\n${label}, median of ${RUNS}: enqueue ${m((f) => f.enqueueS)} s, ${m((f) => f.jobsPerS, 0)} jobs/s`);
});
