/**
 * The runner of the engine-side workloads (bench/workloads/*.ts, bench/workload.ts): runs a workload's variants
 * `--runs` times, alternated, prints each measurement's line to stderr and the median tables to stdout; `--json`
 * prints the record as the last stdout line, `--save` writes it to bench/results/<name>-latest.json.
 * `npm run bench:<name>` is `tsx bench/run.ts <name>`; docs/BENCHMARKS.md says which section each one's rows are.
 *
 *   npx tsx bench/run.ts                        # the workloads and what each measures
 *   npx tsx bench/run.ts capacity --runs 1 --scale 0.2
 */
import { runBenchmark } from './support.js';
import type { Runnable } from './workload.js';

const WORKLOADS: Record<string, () => Promise<{ default: Runnable }>> = {
  capacity: () => import('./workloads/capacity.js'),
  classes: () => import('./workloads/classes.js'),
  rate: () => import('./workloads/rate-limit.js'),
  fairness: () => import('./workloads/fairness.js'),
  shapes: () => import('./workloads/shapes.js'),
  schedules: () => import('./workloads/schedules.js'),
  queues: () => import('./workloads/queues.js'),
  reconcile: () => import('./workloads/reconcile.js'),
  dashboard: () => import('./workloads/dashboard-paging.js'),
  tracing: () => import('./workloads/tracing.js'),
  ledger: () => import('./workloads/ledger.js'),
  latency: () => import('./workloads/latency.js'),
  cost: () => import('./workloads/cost.js'),
  fleet: () => import('./workloads/fleet.js'),
  steady: () => import('./workloads/steady.js'),
};

runBenchmark(async () => {
  const name = process.argv[2] ?? '';
  const load = WORKLOADS[name];
  if (load !== undefined) return (await load()).default.run(name);
  for (const [n, l] of Object.entries(WORKLOADS)) console.log(`${n.padEnd(10)} ${(await l()).default.about}`);
  if (name !== '') throw new Error(`unknown workload '${name}'`);
});
