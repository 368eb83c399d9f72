import type { ChildProcess } from 'node:child_process';
/**
 * Shared helpers for lanewake benchmarks: a fresh database per run (created,
 * dropped, and dropped again on error / SIGINT), statistics, CPU accounting
 * and plain-text tables. Benchmarks are not tests: nothing here asserts.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { createConnection, type Connection, type RowDataPacket } from 'mysql2/promise';
import { pidByName, processCpuUs } from './cost-proc.js';

/** Server URL (no database) the benchmarks use. */
export function benchServerUrl(): string {
  return (process.env.LANEWAKE_BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306').replace(/\/+$/, '');
}

/** A `--server` flag's URL: mariadb (LANEWAKE_BENCH_MYSQL_URL), tidb (LANEWAKE_BENCH_TIDB_URL) or a mysql:// URL. */
export function serverUrlOf(server: string): string {
  if (server === 'mariadb') return benchServerUrl();
  if (server === 'tidb')
    return (process.env.LANEWAKE_BENCH_TIDB_URL ?? 'mysql://root@127.0.0.1:4000').replace(/\/+$/, '');
  if (/^mysql:\/\//.test(server)) return server.replace(/\/+$/, '');
  throw new Error(`--server ${server}: use mariadb, tidb or a mysql:// URL`);
}

/** Builds dist/, which a bench's child processes load, unless `--no-build`. */
export function buildDist(): void {
  if (process.argv.includes('--no-build')) return;
  progress('building dist/ (npm run build)');
  execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], {
    stdio: 'inherit',
    cwd: fileURLToPath(new URL('..', import.meta.url)),
  });
}

async function adminConnection(serverUrl: string): Promise<Connection> {
  const u = new URL(serverUrl);
  return createConnection({
    host: u.hostname,
    port: Number(u.port || 3306),
    user: decodeURIComponent(u.username || 'root'),
    password: decodeURIComponent(u.password),
  });
}

/** Runs `fn` on a short-lived connection without a default database. */
export async function withAdmin<T>(fn: (c: Connection) => Promise<T>, serverUrl = benchServerUrl()): Promise<T> {
  const c = await adminConnection(serverUrl);
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => undefined);
  }
}

// ---------------------------------------------------------------------------
// Cleanup registry: every database a benchmark creates is dropped, on success,
// on error and on SIGINT / SIGTERM.

type Cleanup = () => Promise<void>;
const cleanups = new Set<Cleanup>();
let signalsInstalled = false;
let interrupted = false;

/** True once SIGINT / SIGTERM arrived; long loops should stop. */
export function isInterrupted(): boolean {
  return interrupted;
}

/** Registers `fn` to run at SIGINT / SIGTERM (and from `runCleanups`). Returns the unregister function. */
export function onCleanup(fn: Cleanup): () => void {
  installSignalHandlers();
  cleanups.add(fn);
  return () => {
    cleanups.delete(fn);
  };
}

export async function runCleanups(): Promise<void> {
  const all = [...cleanups].reverse();
  cleanups.clear();
  for (const fn of all) await fn().catch((e: unknown) => console.error('cleanup failed:', e));
}

function installSignalHandlers(): void {
  if (signalsInstalled) return;
  signalsInstalled = true;
  const handler = (signal: NodeJS.Signals): void => {
    if (interrupted) return;
    interrupted = true;
    console.error(`\n${signal}: dropping benchmark databases…`);
    const hardStop = setTimeout(() => process.exit(130), 15_000);
    hardStop.unref();
    void runCleanups().finally(() => process.exit(130));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}

export interface BenchDatabase {
  name: string;
  /** mysql:// URL naming the database. */
  url: string;
  /** Idempotent: ends the database's remaining sessions, then drops it. */
  drop: () => Promise<void>;
}

/**
 * Creates an empty database of its own (`<prefix>_<random>`). It is dropped
 * by `drop()`, or at SIGINT / SIGTERM if the run never got that far. Callers
 * close their pools first; `drop()` also kills any session still using the
 * database (only this database's, i.e. the benchmark's own), so an aborted
 * transaction cannot hold a metadata lock that blocks the DROP.
 */
export async function createBenchDatabase(prefix = 'lwb', serverUrl = benchServerUrl()): Promise<BenchDatabase> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await withAdmin((c) => c.query(`CREATE DATABASE \`${name}\``), serverUrl);
  let dropped = false;
  const drop = async (): Promise<void> => {
    if (dropped) return;
    dropped = true;
    unregister();
    await dropBenchDatabase(name, serverUrl);
  };
  const unregister = onCleanup(drop);
  return { name, url: `${serverUrl}/${name}`, drop };
}

/** Ends the database's remaining sessions (the benchmark's own), then drops it. Idempotent. */
export async function dropBenchDatabase(name: string, serverUrl = benchServerUrl()): Promise<void> {
  await withAdmin(async (c) => {
    const [rows] = await c.query<RowDataPacket[]>(
      'SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()',
      [name],
    );
    for (const r of rows) await c.query(`KILL ${Number(r.id)}`).catch(() => undefined);
    await c.query(`DROP DATABASE IF EXISTS \`${name}\``);
  }, serverUrl);
}

/**
 * Which code was measured: `<short commit>` plus `+dirty` when files under
 * `paths` differ from it (benchmarks of a working tree must say so).
 */
export function codeRevision(paths: readonly string[] = ['src']): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', ...paths], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    return dirty === '' ? head : `${head}+dirty`;
  } catch {
    return 'unknown';
  }
}

// ---------------------------------------------------------------------------
// Statistics.

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Nearest-rank percentile (p in 0..100): the smallest sample with at least p% of samples at or below it. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * s.length));
  return s[Math.min(rank, s.length) - 1]!;
}

export function minMax(values: readonly number[]): { min: number; max: number } {
  if (values.length === 0) return { min: Number.NaN, max: Number.NaN };
  return { min: Math.min(...values), max: Math.max(...values) };
}

export function nowMs(): number {
  return performance.now();
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------
// CPU accounting: this process (node) and the database server, when it runs
// on this machine and /proc is readable. Values are CPU-seconds.

const CLOCK_TICKS = 100; // USER_HZ on Linux

/**
 * The server the benchmark talks to: tidb-server on its port (4000), mariadbd or mysqld otherwise, since both may run
 * at once.
 */
const serverNames = (url = benchServerUrl()): readonly string[] =>
  new URL(url).port === '4000' ? ['tidb-server'] : ['mariadbd', 'mysqld'];

const cpuSeconds = (pid: number | undefined): number | undefined => {
  const us = processCpuUs(pid);
  return us === undefined ? undefined : us / 1e6;
};

let serverPid: number | undefined | null = null;

function serverCpuSeconds(): number | undefined {
  if (serverPid === null) serverPid = pidByName(serverNames());
  return cpuSeconds(serverPid);
}

/**
 * CPU-seconds so far of the SQL server behind `url` on this machine (tidb-server on port 4000, else mariadbd/mysqld).
 */
export function serverCpuSecondsOf(url: string): number | undefined {
  return cpuSeconds(pidByName(serverNames(url)));
}

function machineCpuSeconds(): { busy: number; total: number } | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
    const n = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (n[3] ?? 0) + (n[4] ?? 0);
    const total = n.reduce((a, b) => a + b, 0);
    return { busy: (total - idle) / CLOCK_TICKS, total: total / CLOCK_TICKS };
  } catch {
    return undefined;
  }
}

export interface CpuSample {
  wallMs: number;
  node: number;
  server: number | undefined;
  machine: { busy: number; total: number } | undefined;
}

export interface CpuShare {
  /** Percent of one core over the interval (200% = two cores busy). */
  nodePct: number;
  serverPct: number | undefined;
  /** Busy percent of all cores over the interval, every process included. */
  machineBusyPct: number | undefined;
  /**
   * Percent of one core used by everything else on the machine (other
   * processes, kernel) over the interval: the noise a run was measured under.
   */
  otherPct: number | undefined;
}

export function cpuSample(): CpuSample {
  const u = process.cpuUsage();
  return { wallMs: nowMs(), node: (u.user + u.system) / 1e6, server: serverCpuSeconds(), machine: machineCpuSeconds() };
}

export function cpuShare(from: CpuSample, to: CpuSample = cpuSample()): CpuShare {
  const wall = Math.max(1e-9, (to.wallMs - from.wallMs) / 1000);
  const serverPct =
    from.server !== undefined && to.server !== undefined ? ((to.server - from.server) / wall) * 100 : undefined;
  let machineBusyPct: number | undefined;
  if (from.machine && to.machine && to.machine.total > from.machine.total) {
    machineBusyPct = ((to.machine.busy - from.machine.busy) / (to.machine.total - from.machine.total)) * 100;
  }
  const nodePct = ((to.node - from.node) / wall) * 100;
  const otherPct =
    machineBusyPct !== undefined && serverPct !== undefined
      ? Math.max(0, (machineBusyPct / 100) * availableParallelism() * 100 - nodePct - serverPct)
      : undefined;
  return { nodePct, serverPct, machineBusyPct, otherPct };
}

/**
 * Waits (at most `maxWaitMs`) until the whole machine was less than
 * `busyBelowPct` busy over a `windowMs` window, so a timed part does not start
 * in the middle of someone else's burst on a shared machine. Returns the busy
 * percent of the last window. It changes nothing about what is measured; the
 * noise during the run is still reported (CpuShare.otherPct).
 */
export async function waitForQuiet(maxWaitMs = 3000, busyBelowPct = 25, windowMs = 300): Promise<number | undefined> {
  const deadline = nowMs() + maxWaitMs;
  for (;;) {
    const a = machineCpuSeconds();
    await sleep(windowMs);
    const b = machineCpuSeconds();
    if (!a || !b || b.total <= a.total) return undefined;
    const busy = ((b.busy - a.busy) / (b.total - a.total)) * 100;
    if (busy < busyBelowPct || nowMs() >= deadline) return busy;
  }
}

// ---------------------------------------------------------------------------
// Output.

export type Align = 'left' | 'right';

/** A plain-text table; every cell is already a string. */
export function formatTable(
  headers: readonly string[],
  rows: readonly (readonly string[])[],
  align: readonly Align[] = [],
): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const cell = (text: string, i: number): string =>
    (align[i] ?? 'left') === 'right' ? text.padStart(widths[i]!) : text.padEnd(widths[i]!);
  const line = (cells: readonly string[]): string => `| ${cells.map((c, i) => cell(c, i)).join(' | ')} |`;
  const dashes = (w: number, i: number): string =>
    (align[i] ?? 'left') === 'right' ? `${'-'.repeat(w + 1)}:` : `:${'-'.repeat(w + 1)}`;
  const rule = `|${widths.map(dashes).join('|')}|`;
  return [line(headers), rule, ...rows.map((r) => line(headers.map((_, i) => r[i] ?? '')))].join('\n');
}

export function printTable(
  title: string,
  headers: readonly string[],
  rows: readonly (readonly string[])[],
  align: readonly Align[] = [],
): void {
  console.log(`\n${title}\n`);
  console.log(formatTable(headers, rows, align));
}

/** 12345.6 → "12,346"; small values keep `digits` decimals. */
export function fmt(n: number | undefined | null, digits = 0): string {
  if (n === undefined || n === null || !Number.isFinite(n)) return '—';
  return n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Progress lines go to stderr so stdout stays the table and, last, the JSON. */
export function progress(message: string): void {
  process.stderr.write(`${message}\n`);
}

/** The value after `name` on the command line (`--runs 3`), or undefined. */
export function cliFlag(name: string, args: readonly string[] = process.argv.slice(2)): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

/** Runs a benchmark's main: an error is printed and sets exit code 1; every cleanup runs either way. */
export function runBenchmark(main: () => Promise<void>): void {
  main()
    .catch((error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    })
    .finally(async () => {
      await runCleanups();
    });
}

/** The first IPC message of `type` from a child process; rejects if it exits first. */
export function childMessage<T>(proc: ChildProcess, type: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: { type?: string }): void => {
      if (m?.type !== type) return;
      proc.off('message', onMessage);
      resolve(m as T);
    };
    proc.on('message', onMessage);
    // 'close', not 'exit': a child that sends its figures and exits at once can be seen to exit before
    // its last message is read; 'close' comes once its channels, the IPC one included, are drained.
    proc.once('close', (code) => reject(new Error(`child exited (${code}) before '${type}'`)));
  });
}
