/**
 * Side-by-side benchmark (issue 5): the same workloads against lanewake (three
 * modes) and its peers (BullMQ, graphile-worker, pg-boss), on this machine, in
 * one invocation.
 *
 *   npm run bench                                   # lanewake bench compare
 *   npx tsx bench/compare.ts --runs 1 --scale 0.1 --systems lanewake
 *   npx tsx bench/compare.ts --systems lanewake:wake,bullmq --workloads bulk,latency --json
 *
 * Flags: --runs N (default 3), --scale F (default 1: 20,000-job workloads),
 * --systems a,b (system or system:mode), --workloads a,b, --json (last stdout
 * line: latest.json's shape plus failures).
 *
 * Every (system, mode, workload, run) runs in a fresh process
 * (bench/peers/run-one.ts) with a fresh namespace, so no state or memory
 * carries over; systems are interleaved within each run so drift hits all of
 * them alike. Each run checks every job's effect (bench/peers/run-one.ts); a
 * run that loses or repeats a job is a failure, not a number, and the harness
 * exits 1 at the end if any run failed. Output: bench/results/compare-<time>.json
 * (everything), and for a full run (every system and workload)
 * bench/results/latest.json, docs/BENCHMARKS.md and docs/benchmarks.svg
 * (bench/report.ts).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, release, totalmem, type as osType } from 'node:os';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import pg from 'pg';
import type { RowDataPacket } from 'mysql2/promise';
import { METRICS, sizes, type RunArgs, type RunResult } from './peers/protocol.js';
import { REFERENCE, WORKLOADS, allFactories, factoryLabel, runsWorkload } from './peers/registry.js';
import type { PeerFactory, Workload } from './peers/types.js';
import { latestJson, formatValue, ratioCell, summarize, writeDocs, type CompareResults, type Failure, type NotApplicable } from './report.js';
import { codeRevision, formatTable, isInterrupted, onCleanup, progress, runCleanups, withAdmin } from './support.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const RUN_ONE = fileURLToPath(new URL('./peers/run-one.ts', import.meta.url));
const RESULTS_DIR = `${ROOT}bench/results`;
const CHILD_TIMEOUT_MS = Number(process.env.LANEWAKE_BENCH_CHILD_TIMEOUT_MS ?? 30 * 60_000);
const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const PG_URL = process.env.LANEWAKE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

// ---------------------------------------------------------------------------
// Flags.

interface Options {
  runs: number;
  scale: number;
  /** Raw --systems value (split once the factories are known). */
  systems: string | null;
  workloads: Workload[];
  json: boolean;
}

class UsageError extends Error {}

function parseArgs(argv: readonly string[]): Options {
  const opts: Options = { runs: 3, scale: 1, systems: null, workloads: [...WORKLOADS], json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const [name, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined || v === '') throw new UsageError(`${name} needs a value`);
      return v;
    };
    const list = (): string[] => value().split(',').map((s) => s.trim()).filter((s) => s !== '');
    switch (name) {
      case '--runs': {
        const n = Number(value());
        if (!Number.isInteger(n) || n < 1) throw new UsageError('--runs must be a whole number ≥ 1');
        opts.runs = n;
        break;
      }
      case '--scale': {
        const n = Number(value());
        if (!Number.isFinite(n) || n <= 0 || n > 10) throw new UsageError('--scale must be a number in (0, 10]');
        opts.scale = n;
        break;
      }
      case '--systems':
        opts.systems = value();
        break;
      case '--workloads': {
        const ws = list();
        const bad = ws.filter((w) => !(WORKLOADS as readonly string[]).includes(w));
        if (bad.length > 0) throw new UsageError(`unknown workload ${bad.join(', ')}: use ${WORKLOADS.join(', ')}`);
        opts.workloads = WORKLOADS.filter((w) => ws.includes(w));
        break;
      }
      case '--json':
        opts.json = true;
        break;
      case '--help':
      case '-h':
        console.log('usage: tsx bench/compare.ts [--runs N] [--scale F] [--systems a,b:mode] [--workloads bulk,latency,ordered,four-workers,sixteen-workers,deep-lane] [--json]');
        process.exit(0);
        break;
      default:
        throw new UsageError(`unknown argument ${a}`);
    }
  }
  return opts;
}

/**
 * `--systems` entries: a system ("bullmq") or system:mode ("lanewake:poll 5 s").
 * Modes may themselves contain commas ("batch worker, poll 0.5 s"), so the
 * comma-split pieces are re-joined greedily, longest known name first.
 */
function splitSystems(raw: string, all: readonly PeerFactory[]): string[] {
  const known = new Set([...all.map((f) => f.system), ...all.map(factoryLabel)]);
  const pieces = raw.split(',');
  const out: string[] = [];
  for (let i = 0; i < pieces.length; ) {
    let taken = 0;
    for (let j = pieces.length; j > i; j--) {
      const candidate = pieces.slice(i, j).join(',').trim();
      if (known.has(candidate)) {
        out.push(candidate);
        taken = j - i;
        break;
      }
    }
    if (taken === 0) {
      const p = pieces[i]!.trim();
      if (p !== '') out.push(p);
      taken = 1;
    }
    i += taken;
  }
  return out;
}

function selectFactories(all: readonly PeerFactory[], raw: string | null): PeerFactory[] {
  if (raw === null) return [...all];
  const systems = splitSystems(raw, all);
  const unknown = systems.filter((s) => !all.some((f) => f.system === s || factoryLabel(f) === s));
  if (unknown.length > 0) {
    throw new UsageError(`unknown system ${unknown.join(', ')}: use one of ${[...new Set(all.map((f) => f.system))].join(', ')} or system:mode (${all.map(factoryLabel).join(', ')})`);
  }
  return all.filter((f) => systems.includes(f.system) || systems.includes(factoryLabel(f)));
}

// ---------------------------------------------------------------------------
// The machine and the software measured.

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

async function mariadbVersion(): Promise<string> {
  return withAdmin(async (c) => {
    const [rows] = await c.query<RowDataPacket[]>('SELECT VERSION() AS v');
    return String(rows[0]?.v ?? 'unknown');
  });
}

async function postgresVersion(): Promise<string> {
  const client = new pg.Client({ connectionString: PG_URL });
  try {
    await client.connect();
    const r = await client.query<{ server_version: string }>('SHOW server_version');
    return r.rows[0]?.server_version ?? 'unknown';
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function redisVersion(): Promise<string> {
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: true });
  try {
    await redis.connect();
    const info = await redis.info('server');
    return /redis_version:([^\r\n]+)/.exec(info)?.[1] ?? 'unknown';
  } finally {
    redis.disconnect();
  }
}

function packageVersion(name: string): string | undefined {
  try {
    return (JSON.parse(readFileSync(`${ROOT}node_modules/${name}/package.json`, 'utf8')) as { version?: string }).version;
  } catch {
    return undefined;
  }
}

function osName(): string {
  try {
    const pretty = /^PRETTY_NAME="?([^"\n]+)"?/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1];
    if (pretty) return `${pretty} (${osType()} ${release()})`;
  } catch {
    // not Linux, or no os-release
  }
  return `${osType()} ${release()}`;
}

async function describe(): Promise<{ machine: string; software: Record<string, string> }> {
  const version = async (f: () => Promise<string>): Promise<string> => withTimeout(f(), 5_000).catch((e: unknown) => `unavailable (${e instanceof Error ? e.message : String(e)})`);
  const [mariadb, postgres, redis] = await Promise.all([version(mariadbVersion), version(postgresVersion), version(redisVersion)]);
  const cpu = cpus()[0]?.model.trim() ?? 'unknown CPU';
  const ramGiB = totalmem() / 1024 ** 3;
  const machine = [
    `${cpu}, ${availableParallelism()} cores`,
    `${ramGiB.toFixed(1)} GiB RAM`,
    osName(),
    `Node ${process.version}`,
    `MariaDB ${mariadb}`,
    `PostgreSQL ${postgres}`,
    `Redis ${redis}`,
  ].join('; ');
  const software: Record<string, string> = { Node: process.version, MariaDB: mariadb, PostgreSQL: postgres, Redis: redis };
  for (const p of ['bullmq', 'graphile-worker', 'pg-boss', 'ioredis', 'mysql2', 'pg']) {
    const v = packageVersion(p);
    if (v) software[p] = v;
  }
  return { machine, software };
}

function shellQuote(s: string): string {
  return /^[A-Za-z0-9_./:,=@%+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** The command line as the user typed it, as well as it can be known. */
function commandLine(argv: readonly string[]): string {
  const args = argv.map(shellQuote).join(' ');
  if (process.env.LANEWAKE_BENCH_COMMAND) return process.env.LANEWAKE_BENCH_COMMAND;
  const event = process.env.npm_lifecycle_event;
  if (event === 'bench:compare') return `npm run bench:compare${args ? ` -- ${args}` : ''}`;
  return `npx tsx bench/compare.ts${args ? ` ${args}` : ''}`;
}

// ---------------------------------------------------------------------------
// One child per (system, mode, workload, run).

const nsBase = `cmp${randomBytes(3).toString('hex')}`;
let nsCounter = 0;

function namespacesFor(workload: Workload): string[] {
  const id = `${nsBase}${(nsCounter++).toString(36)}`;
  return workload === 'deep-lane' ? [`${id}a`, `${id}b`] : [id];
}

/** Drops the namespaces of a run whose child could not (crashed, killed, interrupted). */
async function fallbackTeardown(factory: PeerFactory, ns: readonly string[]): Promise<void> {
  for (const id of ns) {
    await factory
      .create({ id })
      .teardown()
      .catch((e: unknown) => console.error(`teardown of ${factoryLabel(factory)} namespace ${id} failed:`, e));
  }
}

function failed(args: RunArgs, reason: string, durationMs: number): RunResult {
  return { kind: 'result', system: args.system, mode: args.mode, workload: args.workload, run: args.run, ok: false, failure: reason, values: {}, effects: [], workerPeakRssMb: [], tornDown: false, durationMs };
}

function isResult(v: unknown): v is RunResult {
  return typeof v === 'object' && v !== null && (v as { kind?: unknown }).kind === 'result';
}

async function runChild(factory: PeerFactory, args: RunArgs): Promise<RunResult> {
  const t0 = performance.now();
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', RUN_ONE, JSON.stringify(args)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
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
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
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
  if (!result || !result.tornDown) await fallbackTeardown(factory, args.ns);
  const elapsed = performance.now() - t0;
  if (timedOut) return failed(args, `timed out after ${CHILD_TIMEOUT_MS / 1000} s`, elapsed);
  if (!result) return failed(args, `run process exited ${signal ?? code} without a result`, elapsed);
  return result;
}

function summaryLine(r: RunResult): string {
  if (!r.ok) return `FAILED: ${(r.failure ?? 'unknown').split('\n')[0]}`;
  return METRICS.filter((m) => m.workload === r.workload && r.values[m.metric] !== undefined)
    .map((m) => `${m.metric} ${formatValue(r.values[m.metric] ?? null, m.unit)}${m.unit === 'count' || m.unit === 'ratio' ? '' : ` ${m.unit}`}`)
    .join(', ');
}

// ---------------------------------------------------------------------------

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  let opts: Options;
  let factories: PeerFactory[];
  try {
    opts = parseArgs(argv);
    if (opts.systems === null || /lanewake/.test(opts.systems)) {
      // lanewake runs from its compiled package, as users run it (the peers run
      // their published JS); its adapter loads dist/, so build before loading it.
      progress('building dist/ (npm run build)');
      execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
    }
    factories = selectFactories(await allFactories(), opts.systems);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(e.message);
      return 2;
    }
    throw e;
  }
  const command = commandLine(argv);
  const startedAt = new Date().toISOString();
  const s = sizes(opts.scale);
  const { machine, software } = await describe();
  progress(`lanewake compare: ${factories.map(factoryLabel).join(', ')}; workloads ${opts.workloads.join(', ')}; ${opts.runs} run(s), scale ${opts.scale}`);
  progress(`machine: ${machine}`);

  const notApplicable: NotApplicable[] = [];
  const plan: { factory: PeerFactory; workload: Workload }[] = [];
  for (const workload of opts.workloads) {
    for (const factory of factories) {
      const r = runsWorkload(factory, workload);
      if (r.runs) plan.push({ factory, workload });
      else notApplicable.push({ workload, system: factory.system, mode: factory.mode, note: r.note });
    }
  }

  const results: RunResult[] = [];
  const failures: Failure[] = [];
  const total = plan.length * opts.runs;
  let done = 0;
  for (let run = 1; run <= opts.runs; run++) {
    for (const { factory, workload } of plan) {
      // SIGINT / SIGTERM: the cleanup handler is dropping what the last run made and will exit.
      if (isInterrupted()) await new Promise(() => undefined);
      done++;
      const args: RunArgs = { role: 'run', system: factory.system, mode: factory.mode, workload, run, scale: opts.scale, ns: namespacesFor(workload) };
      progress(`[${done}/${total}] run ${run}: ${workload} · ${factory.system} (${factory.mode})`);
      const r = await runChild(factory, args);
      if (isInterrupted()) await new Promise(() => undefined);
      results.push(r);
      if (!r.ok) failures.push({ workload, system: factory.system, mode: factory.mode, run, reason: r.failure ?? 'unknown' });
      progress(`        ${summaryLine(r)}  (${(r.durationMs / 1000).toFixed(1)} s)`);
    }
  }

  const finishedAt = new Date().toISOString();
  const compare: CompareResults = {
    format: 'lanewake-compare/1',
    startedAt,
    finishedAt,
    command,
    machine,
    software,
    revision: codeRevision(['src', 'bench']),
    params: { runs: opts.runs, scale: opts.scale, systems: opts.systems === null ? null : factories.map(factoryLabel), workloads: opts.workloads },
    sizes: s,
    reference: { ...REFERENCE },
    factories: factories.map((f) => ({ system: f.system, mode: f.mode, workloads: [...f.workloads], notes: { ...f.notes }, ordersByKey: f.ordersByKey })),
    notApplicable,
    results,
    failures,
    rows: [],
  };
  compare.rows = summarize(compare);

  mkdirSync(RESULTS_DIR, { recursive: true });
  const resultFile = `bench/results/compare-${finishedAt.replace(/\.\d+Z$/, 'Z').replace(/:/g, '-')}.json`;
  writeFileSync(`${ROOT}${resultFile}`, `${JSON.stringify(compare, null, 2)}\n`);
  // The page and latest.json are the full side by side: a run of some systems or workloads writes its own file only.
  const full = opts.systems === null && opts.workloads.length === WORKLOADS.length;
  const latest = latestJson(compare);
  const docs = full ? writeDocs(compare, resultFile) : undefined;
  if (full) writeFileSync(`${RESULTS_DIR}/latest.json`, `${JSON.stringify(latest, null, 2)}\n`);

  const ref = compare.reference;
  console.log(`\nlanewake side by side — median of ${opts.runs} run(s), scale ${opts.scale}\n`);
  console.log(
    formatTable(
      ['workload', 'system', 'mode', 'median', 'min–max', 'unit', `vs ${ref.system} (${ref.mode})`],
      compare.rows.map((x) => [
        x.name,
        x.system,
        x.mode,
        x.median === null ? `FAILED (${x.failedRuns}/${x.runs})` : `${formatValue(x.median, x.unit)}${x.failedRuns > 0 ? ` (${x.failedRuns}/${x.runs} failed)` : ''}`,
        x.min === null || x.max === null ? '—' : `${formatValue(x.min, x.unit)}–${formatValue(x.max, x.unit)}`,
        x.unit,
        ratioCell(x, ref),
      ]),
      ['left', 'left', 'left', 'right', 'right', 'left', 'left'],
    ),
  );
  if (notApplicable.length > 0) {
    console.log('\nn/a:');
    for (const n of notApplicable) console.log(`  ${n.workload} · ${n.system} (${n.mode}): ${n.note}`);
  }
  const poll = compare.rows.find((x) => x.name === 'latency p50' && x.system === ref.system && x.mode === 'poll 5 s');
  if (poll?.ratio) console.log(`\n${ref.system} (${ref.mode}) latency p50 vs poll 5 s: ${poll.ratio.label}`);
  if (failures.length > 0) {
    console.log(`\n${failures.length} FAILED run(s):`);
    for (const f of failures) console.log(`  run ${f.run} ${f.workload} · ${f.system} (${f.mode}): ${f.reason.split('\n')[0]}`);
  } else {
    console.log('\nEffect check: every run started every job exactly once.');
  }
  console.log(
    docs
      ? `\nwrote ${resultFile}, bench/results/latest.json, ${docs.markdown.slice(ROOT.length)}, ${docs.svg.slice(ROOT.length)}`
      : `\nwrote ${resultFile} (a partial run: the page and latest.json are left as they are)`,
  );
  if (opts.json) console.log(JSON.stringify({ ...latest, failures }));
  return failures.length > 0 ? 1 : 0;
}

main()
  .then((code) => {
    process.exitCode = code;
  })
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(async () => {
    await runCleanups();
    // Peer client libraries loaded for the n/a notes and teardowns may keep handles open.
    process.exit(process.exitCode ?? 0);
  });


