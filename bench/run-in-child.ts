/**
 * One (system, mode, workload, run) of bench/compare.ts in a fresh process
 * (bench/peers/run-one.ts) with fresh namespaces: its output passed on, its
 * result line read, and, if it could not drop what it made (crashed,
 * killed, timed out, interrupted), its namespaces dropped here.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { runResult, type RunArgs, type RunResult } from './peers/protocol.js';
import { factoryLabel } from './peers/registry.js';
import type { PeerFactory, Workload } from './peers/types.js';
import { onCleanup } from './support.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const RUN_ONE = fileURLToPath(new URL('./peers/run-one.ts', import.meta.url));
const CHILD_TIMEOUT_MS = Number(process.env.LANEWAKE_BENCH_CHILD_TIMEOUT_MS ?? 30 * 60_000);

const nsBase = `cmp${randomBytes(3).toString('hex')}`;
let nsCounter = 0;

/** Fresh namespace ids for one run of `workload` (deep-lane uses two). */
export function namespacesFor(workload: Workload): string[] {
  const id = `${nsBase}${(nsCounter++).toString(36)}`;
  return workload === 'deep-lane' ? [`${id}a`, `${id}b`] : [id];
}

/** Drops the namespaces of a run whose child could not. */
async function fallbackTeardown(factory: PeerFactory, ns: readonly string[]): Promise<void> {
  for (const id of ns) {
    await factory
      .create({ id })
      .teardown()
      .catch((e: unknown) => console.error(`teardown of ${factoryLabel(factory)} namespace ${id} failed:`, e));
  }
}

function failed(args: RunArgs, reason: string, durationMs: number): RunResult {
  return runResult(args, {
    ok: false,
    failure: reason,
    values: {},
    effects: [],
    workerPeakRssMb: [],
    warnings: [],
    tornDown: false,
    durationMs,
  });
}

function isResult(v: unknown): v is RunResult {
  return typeof v === 'object' && v !== null && (v as { kind?: unknown }).kind === 'result';
}

export async function runInChild(factory: PeerFactory, args: RunArgs): Promise<RunResult> {
  const t0 = performance.now();
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', RUN_ONE, JSON.stringify(args)], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let result: RunResult | undefined;
  let buffered = '';
  const onLine = (line: string): void => {
    if (line.startsWith('{')) {
      try {
        const v: unknown = JSON.parse(line);
        if (isResult(v)) {
          result = v;
          return;
        }
      } catch {
        // not ours: pass it on
      }
    }
    if (line !== '') process.stderr.write(`  │ ${line}\n`);
  };
  child.stdout?.setEncoding('utf8');
  child.stdout?.on('data', (d: string) => {
    buffered += d;
    let i: number;
    while ((i = buffered.indexOf('\n')) >= 0) {
      onLine(buffered.slice(0, i));
      buffered = buffered.slice(i + 1);
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  const unregister = onCleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 8_000);
      await exited;
      clearTimeout(t);
    }
    await fallbackTeardown(factory, args.ns);
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 15_000).unref();
  }, CHILD_TIMEOUT_MS);
  const { code, signal } = await exited;
  clearTimeout(timer);
  unregister();
  onLine(buffered);
  if (!result?.tornDown) await fallbackTeardown(factory, args.ns);
  const elapsed = performance.now() - t0;
  if (timedOut) return failed(args, `timed out after ${CHILD_TIMEOUT_MS / 1000} s`, elapsed);
  if (!result) return failed(args, `run process exited ${signal ?? code} without a result`, elapsed);
  return result;
}
