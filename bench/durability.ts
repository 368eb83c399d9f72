/**
 * How durable each server's commits were while the side-by-side benchmark
 * ran: the settings that decide whether a write the system was told is done
 * survives a crash. A queue's throughput means little without them: an
 * fsync per commit costs what a flush once a second does not, and BullMQ's
 * completions are only as durable as Redis's persistence.
 *
 *   MariaDB     innodb_flush_log_at_trx_commit (and sync_binlog when the binlog is on): lanewake's ledger
 *   PostgreSQL  fsync, synchronous_commit: graphile-worker's and pg-boss's jobs
 *   Redis       appendonly, appendfsync, save: BullMQ's jobs and completions (lanewake's wake-up hints only)
 */
import { Redis } from 'ioredis';
import type { RowDataPacket } from 'mysql2/promise';
import pg from 'pg';
import { withAdmin } from './support.js';

export interface ServerDurability {
  server: 'MariaDB' | 'PostgreSQL' | 'Redis';
  /** Whose jobs the server holds in this benchmark. */
  holds: string;
  /** The settings as the server reported them (empty when it could not be asked). */
  settings: Record<string, string>;
  /** What a crash can lose of a write the system reported done, in words. */
  verdict: string;
}

const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const PG_URL = process.env.LANEWAKE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

async function mariadb(): Promise<Omit<ServerDurability, 'server' | 'holds'>> {
  const [rows] = await withAdmin((c) =>
    c.query<RowDataPacket[]>(
      'SELECT @@global.innodb_flush_log_at_trx_commit AS flush, @@global.log_bin AS ' +
        'log_bin, @@global.sync_binlog AS sync_binlog',
    ),
  );
  const r = rows[0];
  const settings: Record<string, string> = {
    innodb_flush_log_at_trx_commit: String(r?.flush),
    log_bin: String(r?.log_bin),
    sync_binlog: String(r?.sync_binlog),
  };
  const flush = settings.innodb_flush_log_at_trx_commit;
  let verdict =
    flush === '1'
      ? 'every commit is flushed to disk (fsync) before it returns'
      : flush === '2'
        ? 'commits are written at COMMIT and flushed about once a second: a machine crash can lose the last second'
        : 'the log is written and flushed about once a second: a crash of the server can lose the last second';
  if (settings.log_bin === '1' && settings.sync_binlog !== '1')
    verdict +=
      `; the binlog is synced every ` +
      `${settings.sync_binlog === '0' ? 'time the OS decides' : `${settings.sync_binlog} commits`}`;
  return { settings, verdict };
}

async function postgres(): Promise<Omit<ServerDurability, 'server' | 'holds'>> {
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
    return { settings, verdict };
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function redis(): Promise<Omit<ServerDurability, 'server' | 'holds'>> {
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    const get = async (name: string): Promise<string> => {
      const pair = (await client.config('GET', name)) as string[];
      return pair[1] ?? 'unknown';
    };
    const settings = {
      appendonly: await get('appendonly'),
      appendfsync: await get('appendfsync'),
      save: await get('save'),
    };
    const snapshots =
      settings.save.trim() === '' ? 'no RDB snapshots (save "")' : `RDB snapshots (save "${settings.save}")`;
    let verdict: string;
    if (settings.appendonly === 'yes') {
      verdict =
        settings.appendfsync === 'always'
          ? 'every write is fsynced to the append-only file before its reply'
          : settings.appendfsync === 'everysec'
            ? 'append-only file fsynced once a second: a crash can lose the last second of writes'
            : 'append-only file flushed when the OS decides: a crash can lose the last ~30 s of writes';
    } else {
      verdict =
        settings.save.trim() === ''
          ? 'no persistence (appendonly no, save ""): a Redis restart loses every job and completion'
          : `no append-only file; ${snapshots}: a crash loses every write since the last snapshot`;
    }
    return { settings, verdict };
  } finally {
    client.disconnect();
  }
}

async function probe(
  server: ServerDurability['server'],
  holds: string,
  read: () => Promise<Omit<ServerDurability, 'server' | 'holds'>>,
): Promise<ServerDurability> {
  try {
    return { server, holds, ...(await read()) };
  } catch (e) {
    return {
      server,
      holds,
      settings: {},
      verdict: `unknown: could not read the settings (${e instanceof Error ? e.message : String(e)})`,
    };
  }
}

/** Each server's durability settings, read now (the harness reads them at the start of a run). */
export async function durability(): Promise<ServerDurability[]> {
  return Promise.all([
    probe('MariaDB', "lanewake's ledger", mariadb),
    probe('PostgreSQL', "graphile-worker's and pg-boss's jobs", postgres),
    probe('Redis', "BullMQ's jobs and completions; lanewake's wake-up hints only", redis),
  ]);
}

/**
 * One line per server: "MariaDB (lanewake's ledger): innodb_flush_log_at_trx_commit=1, … — every commit is flushed …".
 */
export function durabilityLines(servers: readonly ServerDurability[]): string[] {
  return servers.map((d) => {
    const settings = Object.entries(d.settings)
      .map(([k, v]) => `${k}=${v === '' ? '""' : v}`)
      .join(', ');
    return `${d.server} (${d.holds}): ${settings || 'settings unknown'}: ${d.verdict}`;
  });
}
