/**
 * What a side-by-side run was measured on and with: the machine (CPU, cores,
 * RAM, OS), the server and library versions, each server's durability
 * settings (whether a write the system was told is done survives a crash:
 * an fsync per commit costs what a flush once a second does not), and the
 * command line. One connection per server reads its version and settings.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism, cpus, release, totalmem, type as osType } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { RowDataPacket } from 'mysql2/promise';
import pg from 'pg';
import { PG_URL, REDIS_URL } from './peers/types.js';
import { withAdmin } from './support.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

export interface ServerDurability {
  server: 'MariaDB' | 'PostgreSQL' | 'Redis';
  /** Whose jobs the server holds in this benchmark. */
  holds: string;
  /** The settings as the server reported them (empty when it could not be asked). */
  settings: Record<string, string>;
  /** What a crash can lose of a write the system reported done, in words. */
  verdict: string;
}

interface ServerRead {
  version: string;
  settings: Record<string, string>;
  verdict: string;
}

async function mariadb(): Promise<ServerRead> {
  const [rows] = await withAdmin((c) =>
    c.query<RowDataPacket[]>(
      'SELECT VERSION() AS v, @@global.innodb_flush_log_at_trx_commit AS flush, @@global.log_bin AS log_bin, ' +
        '@@global.sync_binlog AS sync_binlog',
    ),
  );
  const r = rows[0];
  const s = { innodb_flush_log_at_trx_commit: String(r?.flush), log_bin: String(r?.log_bin) };
  const settings: Record<string, string> = { ...s, sync_binlog: String(r?.sync_binlog) };
  let verdict =
    s.innodb_flush_log_at_trx_commit === '1'
      ? 'every commit is flushed to disk (fsync) before it returns'
      : s.innodb_flush_log_at_trx_commit === '2'
        ? 'commits are written at COMMIT and flushed about once a second: a machine crash can lose the last second'
        : 'the log is written and flushed about once a second: a crash of the server can lose the last second';
  const sync = settings.sync_binlog;
  if (s.log_bin === '1' && sync !== '1')
    verdict += `; the binlog is synced every ${sync === '0' ? 'time the OS decides' : `${sync} commits`}`;
  return { version: String(r?.v ?? 'unknown'), settings, verdict };
}

async function postgres(): Promise<ServerRead> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    const show = async (name: string): Promise<string> =>
      (await client.query<Record<string, string>>(`SHOW ${name}`)).rows[0]?.[name] ?? 'unknown';
    const settings = {
      fsync: await show('fsync'),
      synchronous_commit: await show('synchronous_commit'),
      wal_writer_delay: await show('wal_writer_delay'),
    };
    const verdict =
      settings.fsync !== 'on'
        ? 'fsync is off: a machine crash can lose or corrupt committed data'
        : settings.synchronous_commit === 'off'
          ? `commits return before their WAL is flushed: a crash can lose the last ~3 × ` +
            `wal_writer_delay (${settings.wal_writer_delay})`
          : "every commit's WAL is flushed to disk (fsync) before it returns";
    return { version: await show('server_version'), settings, verdict };
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function redis(): Promise<ServerRead> {
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    const get = async (name: string): Promise<string> => ((await client.config('GET', name)) as string[])[1] ?? '';
    const settings = {
      appendonly: await get('appendonly'),
      appendfsync: await get('appendfsync'),
      save: await get('save'),
    };
    const save = settings.save.trim();
    const verdict =
      settings.appendonly === 'yes'
        ? settings.appendfsync === 'always'
          ? 'every write is fsynced to the append-only file before its reply'
          : settings.appendfsync === 'everysec'
            ? 'append-only file fsynced once a second: a crash can lose the last second of writes'
            : 'append-only file flushed when the OS decides: a crash can lose the last ~30 s of writes'
        : save === ''
          ? 'no persistence (appendonly no, save ""): a Redis restart loses every job and completion'
          : `no append-only file; RDB snapshots (save "${settings.save}"): ` +
            'a crash loses every write since the last snapshot';
    const version = /redis_version:([^\r\n]+)/.exec(await client.info('server'))?.[1] ?? 'unknown';
    return { version, settings, verdict };
  } finally {
    client.disconnect();
  }
}

/** `read()`, or why it could not be read within 5 s. */
async function probe(read: () => Promise<ServerRead>): Promise<ServerRead> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), 5_000)));
    return await Promise.race([read(), timeout]);
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    return { version: `unavailable (${why})`, settings: {}, verdict: `unknown: could not read the settings (${why})` };
  } finally {
    clearTimeout(timer);
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

export interface MachineRecord {
  machine: string;
  software: Record<string, string>;
  durability: ServerDurability[];
}

/** The machine in one line, every server and library version, and each server's durability settings, read now. */
export async function describeMachine(): Promise<MachineRecord> {
  const [m, p, r] = await Promise.all([probe(mariadb), probe(postgres), probe(redis)]);
  const cpu = cpus()[0]?.model.trim() ?? 'unknown CPU';
  const machine = [
    `${cpu}, ${availableParallelism()} cores`,
    `${(totalmem() / 1024 ** 3).toFixed(1)} GiB RAM`,
    osName(),
    `Node ${process.version}`,
    `MariaDB ${m.version}`,
    `PostgreSQL ${p.version}`,
    `Redis ${r.version}`,
  ].join('; ');
  const software: Record<string, string> = {
    Node: process.version,
    MariaDB: m.version,
    PostgreSQL: p.version,
    Redis: r.version,
  };
  for (const name of ['bullmq', 'graphile-worker', 'pg-boss', 'ioredis', 'mysql2', 'pg']) {
    const v = packageVersion(name);
    if (v) software[name] = v;
  }
  const durability: ServerDurability[] = [
    { server: 'MariaDB', holds: "lanewake's ledger", settings: m.settings, verdict: m.verdict },
    { server: 'PostgreSQL', holds: "graphile-worker's and pg-boss's jobs", settings: p.settings, verdict: p.verdict },
    {
      server: 'Redis',
      holds: "BullMQ's jobs and completions; lanewake's wake-up hints only",
      settings: r.settings,
      verdict: r.verdict,
    },
  ];
  return { machine, software, durability };
}

/** One line per server: "MariaDB (lanewake's ledger): innodb_flush_log_at_trx_commit=1, …: every commit is …". */
export function durabilityLines(servers: readonly ServerDurability[]): string[] {
  return servers.map((d) => {
    const settings = Object.entries(d.settings)
      .map(([k, v]) => `${k}=${v === '' ? '""' : v}`)
      .join(', ');
    return `${d.server} (${d.holds}): ${settings || 'settings unknown'}: ${d.verdict}`;
  });
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
