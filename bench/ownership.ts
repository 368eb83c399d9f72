/**
 * What fencing the writes by the ownership epoch costs (issue 50 §2): one
 * consumer (concurrency 32, Redis wake-ups) drains a backlog of no-op items
 * of a queue without ownership (`plain`) and of a queue claimed under an
 * epoch (`owned`), with the item ended by the batched completion (`noop`)
 * or inside ctx.transaction (`tx`). Runs alternate between this checkout
 * and a base checkout (`--base`), A B B A, so the machine's noise falls on
 * both alike; a queue without ownership must cost the same on both.
 *
 *   npx tsx bench/ownership.ts --base /tmp/lw-bench-base --runs 3
 *   npx tsx bench/ownership.ts --jobs 5000 --runs 1 --workloads noop
 *   npx tsx bench/ownership.ts --statements --runs 30   # the completion statements alone, plain and owned alternated
 *
 * Server: LANEWAKE_BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306),
 * Redis: LANEWAKE_BENCH_REDIS_URL (default redis://127.0.0.1:6379). Each run
 * has a fresh database and key prefix, dropped after, and checks that every
 * item ran once and completed; the code runs from each checkout's sources.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type * as Lanewake from '../src/index.js';
import { cliFlag, createBenchDatabase, median, progress, runBenchmark } from './support.js';

type Api = Pick<typeof Lanewake, 'Consumer' | 'Ledger' | 'Producer' | 'WakeChannel' | 'createLogger'>;
type Variant = 'plain' | 'owned';
type Workload = 'noop' | 'tx';

interface Run {
  code: string;
  workload: Workload;
  variant: Variant;
  jobsS: number;
}

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => cliFlag(`--${name}`, args);
const RUNS = Number(flag('runs') ?? 3);
const JOBS = Number(flag('jobs') ?? 10_000);
const BASE = flag('base');
const WORKLOADS = (flag('workloads') ?? 'noop,tx').split(',') as Workload[];
const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const QUEUE = 'owned';

async function apiOf(root: string): Promise<Api> {
  return (await import(pathToFileURL(`${root}/src/index.ts`).href)) as Api;
}

async function once(code: string, api: Api, workload: Workload, variant: Variant): Promise<Run> {
  const db = await createBenchDatabase('lwown');
  const ledger = new api.Ledger({ url: db.url, poolSize: 12 });
  const wake = new api.WakeChannel({
    redis: REDIS_URL,
    keyPrefix: `lwbench:${randomBytes(4).toString('hex')}:`,
    logger: api.createLogger('bench', 'warn'),
  });
  try {
    await ledger.migrate();
    const epoch =
      variant === 'owned'
        ? (await ledger.activate({ queue: QUEUE, deployment: 'bench', expectEpoch: 0 })).epoch
        : undefined;
    const producer = new api.Producer({ ledger, wake });
    for (let i = 0; i < JOBS; i += 500) {
      await producer.enqueueMany(
        Array.from({ length: Math.min(500, JOBS - i) }, (_, k) => ({
          queue: QUEUE,
          type: 'job',
          payload: { n: i + k },
        })),
      );
    }
    const seen = new Map<string, number>();
    const ran = (id: string): void => void seen.set(id, (seen.get(id) ?? 0) + 1);
    const consumer = new api.Consumer({
      ledger,
      wake,
      queue: QUEUE,
      concurrency: 32,
      logger: api.createLogger('bench', 'warn'),
      ...(epoch !== undefined ? { epoch } : {}),
      handlers: {
        job:
          workload === 'noop'
            ? async (job: { id: string }) => ran(job.id)
            : (job: { id: string }, ctx: Lanewake.JobContext) => ctx.transaction(async () => ran(job.id)),
      },
    });
    const t0 = performance.now();
    await consumer.start();
    const deadline = Date.now() + 300_000;
    while (consumer.counters.completed < JOBS) {
      if (Date.now() > deadline) throw new Error(`${code} ${workload}/${variant}: the backlog did not drain`);
      await new Promise((r) => setTimeout(r, 2));
    }
    const elapsed = performance.now() - t0;
    await consumer.stop();
    const repeats = [...seen.values()].filter((n) => n !== 1).length;
    if (seen.size !== JOBS || repeats > 0) {
      throw new Error(`${code} ${workload}/${variant}: ${seen.size} of ${JOBS} ran, ${repeats} more than once`);
    }
    return { code, workload, variant, jobsS: (JOBS / elapsed) * 1000 };
  } finally {
    await wake.timers.close();
    await wake.dropKeys();
    await wake.close();
    await ledger.close();
    await db.drop();
  }
}

/**
 * The statements alone (`--statements`): per round, 500 items claimed in one
 * claim and completed by one batched statement, then 50 completed one by one,
 * on a queue without ownership and on one claimed under an epoch, the two
 * alternated round by round in one database. Medians in ms.
 */
async function statements(api: Api, rounds: number): Promise<void> {
  const db = await createBenchDatabase('lwowns');
  const ledger = new api.Ledger({ url: db.url, poolSize: 4 });
  try {
    await ledger.migrate();
    await ledger.activate({ queue: 'fenced', deployment: 'bench', expectEpoch: 0 });
    const timed: Record<Variant, { batch: number[]; single: number[] }> = {
      plain: { batch: [], single: [] },
      owned: { batch: [], single: [] },
    };
    for (let r = 0; r < rounds * 2; r++) {
      const variant: Variant = r % 4 === 0 || r % 4 === 3 ? 'plain' : 'owned';
      const queue = variant === 'plain' ? 'plain' : 'fenced';
      await ledger.enqueueMany(Array.from({ length: 550 }, (_, n) => ({ queue, type: 'job', payload: { n } })));
      const claim = async (limit: number) =>
        (
          await ledger.claim({
            queue,
            owner: 'bench',
            limit,
            leaseMs: 60_000,
            ...(variant === 'owned' ? { epoch: 1 } : {}),
          })
        ).items;
      const batch = await claim(500);
      let t0 = performance.now();
      const done = await ledger.completeMany(batch.map((handle) => ({ handle })));
      timed[variant].batch.push(performance.now() - t0);
      const singles = await claim(50);
      t0 = performance.now();
      for (const handle of singles) await ledger.complete(handle);
      timed[variant].single.push((performance.now() - t0) / singles.length);
      if (done.some((d) => !d.won)) throw new Error('a completion lost');
    }
    const row = (v: Variant) => ({
      variant: v,
      'batch of 500, ms': median(timed[v].batch).toFixed(2),
      'single, ms': median(timed[v].single).toFixed(3),
      rounds: timed[v].batch.length,
    });
    console.table([row('plain'), row('owned')]);
  } finally {
    await ledger.close();
    await db.drop();
  }
}

async function main(): Promise<void> {
  const here = fileURLToPath(new URL('..', import.meta.url)).replace(/\/$/, '');
  if (args.includes('--statements')) return statements(await apiOf(here), RUNS);
  const codes: [string, Api][] = [['this', await apiOf(here)]];
  if (BASE !== undefined) codes.push(['base', await apiOf(BASE)]);
  const runs: Run[] = [];
  for (let r = 0; r < RUNS; r++) {
    const order = r % 2 === 0 ? codes : [...codes].reverse();
    for (const workload of WORKLOADS) {
      for (const variant of ['plain', 'owned'] as const) {
        for (const [code, api] of order) {
          const run = await once(code, api, workload, variant);
          progress(`run ${r + 1}: ${code} ${workload}/${variant}: ${run.jobsS.toFixed(0)} jobs/s`);
          runs.push(run);
        }
      }
    }
  }
  const rows: Record<string, number | string>[] = [];
  for (const workload of WORKLOADS) {
    for (const variant of ['plain', 'owned'] as const) {
      const row: Record<string, number | string> = { workload, variant };
      for (const [code] of codes) {
        const of = runs
          .filter((x) => x.code === code && x.workload === workload && x.variant === variant)
          .map((x) => x.jobsS);
        row[`${code} median jobs/s`] = Math.round(median(of));
        row[`${code} runs`] = of.map((v) => Math.round(v)).join(' ');
      }
      rows.push(row);
    }
  }
  console.table(rows);
  console.log(JSON.stringify({ jobs: JOBS, runs: RUNS, results: runs }));
}

runBenchmark(main);
