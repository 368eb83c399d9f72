/**
 * What a side-by-side run was measured on and with: the machine (CPU,
 * cores, RAM, OS), the server and library versions, and the command line.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism, cpus, release, totalmem, type as osType } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { RowDataPacket } from 'mysql2/promise';
import pg from 'pg';
import { withAdmin } from './support.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const PG_URL = process.env.LANEWAKE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<T>((_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), ms))),
    ]);
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
    return (JSON.parse(readFileSync(`${ROOT}node_modules/${name}/package.json`, 'utf8')) as { version?: string })
      .version;
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

/** The machine in one line, and every server and library version. */
export async function describeMachine(): Promise<{ machine: string; software: Record<string, string> }> {
  const version = async (f: () => Promise<string>): Promise<string> =>
    withTimeout(f(), 5_000).catch((e: unknown) => `unavailable (${e instanceof Error ? e.message : String(e)})`);
  const [mariadb, postgres, redis] = await Promise.all([
    version(mariadbVersion),
    version(postgresVersion),
    version(redisVersion),
  ]);
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
  const software: Record<string, string> = {
    Node: process.version,
    MariaDB: mariadb,
    PostgreSQL: postgres,
    Redis: redis,
  };
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
export function commandLine(argv: readonly string[]): string {
  const args = argv.map(shellQuote).join(' ');
  if (process.env.LANEWAKE_BENCH_COMMAND) return process.env.LANEWAKE_BENCH_COMMAND;
  const event = process.env.npm_lifecycle_event;
  if (event === 'bench:compare') return `npm run bench:compare${args ? ` -- ${args}` : ''}`;
  return `npx tsx bench/compare.ts${args ? ` ${args}` : ''}`;
}
