/**
 * One run of one workload against one (system, mode), in a fresh process,
 * so nothing (state, caches, memory) leaks from one system to the next:
 *
 *   node --import tsx bench/peers/run-one.ts
 * '{"system":"lanewake","mode":"wake","workload":"bulk","run":1,"scale":0.1,"ns":["abc123"]}'
 *
 * It makes the namespace(s), runs the workload (bench/peers/workloads/),
 * checks every job's effect and the system's completed count, drops
 * everything it made, and prints one JSON line (RunResult) to stdout.
 */
import { performance } from 'node:perf_hooks';
import type { Outcome, WorkloadFn } from './phase.js';
import { RSS_METRIC, runResult, sizes, type RunArgs, type RunResult } from './protocol.js';
import { findFactory } from './registry.js';
import { Session } from './session.js';
import { captureProcessWarnings, recordedWarnings } from './warnings.js';
import { deepLane, latencyInProcess, latencyTwoProcesses } from './workloads/latency.js';
import { bulk, ordered, workerProcesses } from './workloads/throughput.js';

const maxRssMb = (): number => process.resourceUsage().maxRSS / 1024;

const WORKLOADS: Record<RunArgs['workload'], WorkloadFn> = {
  bulk,
  latency: latencyTwoProcesses,
  'latency-in-process': latencyInProcess,
  ordered,
  'four-workers': workerProcesses('four-workers', (s) => ({
    jobs: s.fourWorkers,
    processes: s.workerProcesses,
    concurrency: s.concurrency,
  })),
  'sixteen-workers': workerProcesses('sixteen-workers', (s) => ({
    jobs: s.sixteenWorkers,
    processes: s.sixteenProcesses,
    concurrency: s.sixteenConcurrency,
  })),
  'deep-lane': deepLane,
};

/** One line per distinct warning over every process of the run, saying in how many it came. */
function mergeWarnings(own: readonly string[], fromWorkers: readonly string[]): string[] {
  const processes = new Map<string, number>();
  for (const w of [...own, ...fromWorkers]) processes.set(w, (processes.get(w) ?? 0) + 1);
  return [...processes].map(([w, n]) => (n > 1 ? `${w} [in ${n} processes]` : w));
}

async function runMain(args: RunArgs): Promise<RunResult> {
  const started = performance.now();
  captureProcessWarnings();
  const factory = await findFactory(args.system, args.mode);
  const session = new Session(factory);
  const out: Outcome = { values: {}, effects: [], failures: [], workerPeakRssMb: [], warnings: [] };
  try {
    await WORKLOADS[args.workload](session, args, sizes(args.scale), out);
  } catch (error) {
    out.failures.push(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  } finally {
    await session.finishAll();
  }
  // No worker process: the worker ran in this one.
  if (out.workerPeakRssMb.length === 0) {
    out.workerPeakRssMb.push(maxRssMb());
    out.values[RSS_METRIC] = maxRssMb();
  }
  const ok = out.failures.length === 0;
  return runResult(args, {
    ok,
    ...(ok ? {} : { failure: out.failures.join(' | ') }),
    values: out.values,
    effects: out.effects,
    workerPeakRssMb: out.workerPeakRssMb,
    warnings: mergeWarnings(recordedWarnings(), out.warnings),
    tornDown: session.tornDown,
    durationMs: performance.now() - started,
  });
}

function write(line: string): Promise<void> {
  return new Promise((resolve) => process.stdout.write(`${line}\n`, () => resolve()));
}

async function main(): Promise<void> {
  const raw = process.argv[2];
  if (!raw) throw new Error('usage: run-one.ts <json args>');
  const result = await runMain(JSON.parse(raw) as RunArgs);
  await write(JSON.stringify(result));
  // Some clients keep sockets or timers alive after close(); the run is over.
  process.exit(0);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
