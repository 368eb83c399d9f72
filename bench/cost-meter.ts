/**
 * The counters the cost workload (bench/workloads/cost.ts) reads before and after each phase: the SQL
 * server's CPU (cost-proc.ts), its row counters (MariaDB/MySQL: SHOW GLOBAL
 * STATUS; TiDB: statements_summary of the run's schema), and this process's
 * CPU. A PostgreSQL meter (CPU only) serves the graphile-worker comparison.
 *
 * The server process is the one listening on the URL's port, else the first
 * process of the family's name. /proc gives CPU in clock ticks of 10 ms: a
 * phase's server CPU is exact to ±10 ms.
 */
import { createConnection, type Connection, type RowDataPacket } from 'mysql2/promise';
import {
  childCpuUs,
  isLocalHost,
  listenerPid,
  ownCpuDeltaUs,
  peersOfOwnConnections,
  pidByName,
  processCpuUs,
  processTreeCpuUs,
  procStat,
  readComm,
  threadCpuUs,
} from './cost-proc.js';
import { countingTimeNs } from './sql-count.js';

export type ServerFamily = 'mariadb' | 'mysql' | 'tidb';

/** What one sample-to-sample interval cost, in totals (bench/workloads/cost.ts divides by jobs). */
export interface CostDelta {
  wallMs: number;
  workerCpuUs: number;
  /** The whole server's; undefined when it is not on this machine or /proc is not readable. */
  serverCpuUs: number | undefined;
  /**
   * The part that served this process's own connections (MariaDB: their
   * threads; PostgreSQL: their backends): no other client's work, and no
   * background work (log writing, purge, checkpoints) either. Undefined for TiDB.
   */
  serverCpuOwnUs: number | undefined;
  /** MariaDB/MySQL: SHOW GLOBAL STATUS deltas (server-wide); TiDB: sums over the schema's statements. */
  counters: Record<string, number> | undefined;
  /** What counting round trips took, already taken off workerCpuUs. */
  countingUs: number;
}

/** This process's CPU so far, less what counting its round trips took (sql-count.ts). */
function workerCpuUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system - countingTimeNs() / 1000;
}

function serverPid(url: URL, names: readonly string[]): number | undefined {
  if (!isLocalHost(url.hostname)) return undefined;
  return listenerPid(Number(url.port || 3306)) ?? pidByName(names);
}

// ---------------------------------------------------------------------------
// MySQL-protocol servers.

/** SHOW GLOBAL STATUS counters read per phase (rows read and written, bench/workloads/cost.ts). */
const STATUS_COUNTERS = [
  ...['first', 'key', 'last', 'next', 'prev', 'rnd', 'rnd_next'].map((k) => `Handler_read_${k}`),
  ...['Handler_write', 'Handler_update', 'Handler_delete'],
];

/** statements_summary columns summed per schema (EXEC_COUNT × AVG_x: TiDB keeps averages, as integers). */
const TIDB_AVERAGES = ['AVG_TOTAL_KEYS', 'AVG_AFFECTED_ROWS'] as const;

interface Sample {
  wallMs: number;
  workerCpuUs: number;
  countingUs: number;
  serverCpuUs: number | undefined;
  counters: Record<string, number> | undefined;
  /** CPU so far of each thread (MariaDB/MySQL) or backend (PostgreSQL) of the server. */
  parts: Map<number, number>;
  /** Which of those served this process's connections now; undefined when that cannot be told. */
  own: Set<number> | undefined;
}

function cpuDelta(
  from: Sample,
  to: Sample,
): Pick<CostDelta, 'wallMs' | 'workerCpuUs' | 'countingUs' | 'serverCpuUs' | 'serverCpuOwnUs'> {
  return {
    wallMs: to.wallMs - from.wallMs,
    workerCpuUs: to.workerCpuUs - from.workerCpuUs,
    countingUs: to.countingUs - from.countingUs,
    serverCpuUs:
      from.serverCpuUs !== undefined && to.serverCpuUs !== undefined ? to.serverCpuUs - from.serverCpuUs : undefined,
    serverCpuOwnUs:
      to.own === undefined || to.serverCpuUs === undefined ? undefined : ownCpuDeltaUs(from.parts, to.parts, to.own),
  };
}

export interface ServerDescription {
  family: ServerFamily;
  version: string;
  /** The URL without its password. */
  url: string;
  /** The process whose CPU is read, if found. */
  pid: number | undefined;
}

function redacted(url: URL): string {
  const u = new URL(url.href);
  if (u.password !== '') u.password = '***';
  return u.href.replace(/\/$/, '');
}

/**
 * One long-lived connection to the SQL server, used for nothing but the
 * counters (a connection per sample would cost the server more than the
 * sample). Each sample's own cost to the counters is measured at open and
 * taken off every delta.
 */
export class SqlServerMeter {
  private tidbColumns: string[] = [];
  private selfCost: Record<string, number> = {};
  private tidbFailed = false;

  private constructor(
    private readonly connection: Connection,
    readonly server: ServerDescription,
  ) {}

  static async open(serverUrl: string): Promise<SqlServerMeter> {
    const url = new URL(serverUrl);
    const connection = await createConnection({
      host: url.hostname,
      port: Number(url.port || 3306),
      user: decodeURIComponent(url.username || 'root'),
      password: decodeURIComponent(url.password),
    });
    const [rows] = await connection.query<RowDataPacket[]>('SELECT VERSION() AS v');
    const version = String(rows[0]?.v ?? '');
    const family: ServerFamily = /tidb/i.test(version) ? 'tidb' : /mariadb/i.test(version) ? 'mariadb' : 'mysql';
    const names = family === 'tidb' ? ['tidb-server'] : ['mariadbd', 'mysqld'];
    const meter = new SqlServerMeter(connection, { family, version, url: redacted(url), pid: serverPid(url, names) });
    await meter.calibrate();
    return meter;
  }

  /** Counter deltas of back-to-back samples: what a sample costs itself (the smallest of three). */
  private async calibrate(): Promise<void> {
    if (this.server.family === 'tidb') {
      const [cols] = await this.connection.query<RowDataPacket[]>(
        'SELECT UPPER(COLUMN_NAME) AS c FROM information_schema.columns WHERE ' +
          "TABLE_SCHEMA = 'information_schema' AND TABLE_NAME = 'STATEMENTS_SUMMARY'",
      );
      const have = new Set(cols.map((r) => String(r.c)));
      this.tidbColumns = TIDB_AVERAGES.filter((c) => have.has(c));
      return;
    }
    const samples: Record<string, number>[] = [];
    for (let i = 0; i < 4; i++) samples.push((await this.sample('')).counters ?? {});
    const deltas = samples.slice(1).map((s, i) => counterDelta(samples[i]!, s));
    for (const name of Object.keys(deltas[0] ?? {})) this.selfCost[name] = Math.min(...deltas.map((d) => d[name] ?? 0));
  }

  private async statusCounters(): Promise<Record<string, number>> {
    const list = STATUS_COUNTERS.map((c) => `'${c}'`).join(', ');
    const [rows] = await this.connection.query<RowDataPacket[]>(`SHOW GLOBAL STATUS WHERE Variable_name IN (${list})`);
    return Object.fromEntries(rows.map((r) => [String(r.Variable_name), Number(r.Value)]));
  }

  /** Sums over the statements TiDB ran with `database` as their schema, and the summary window they are in. */
  private async tidbCounters(database: string): Promise<Record<string, number> | undefined> {
    const products = this.tidbColumns
      .map((c) => `, COALESCE(SUM(EXEC_COUNT * ${c}), 0) AS ${c.replace(/^AVG_/, '')}`)
      .join('');
    try {
      const [rows] = await this.connection.query<RowDataPacket[]>(
        `SELECT COALESCE(SUM(EXEC_COUNT), 0) AS STATEMENTS, COALESCE(SUM(SUM_LATENCY), 0) AS LATENCY_NS${products},
                COALESCE(UNIX_TIMESTAMP(MAX(SUMMARY_BEGIN_TIME)), 0) AS SUMMARY_WINDOW
         FROM information_schema.statements_summary WHERE SCHEMA_NAME = ?`,
        [database],
      );
      const row = rows[0];
      return row === undefined ? undefined : Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)]));
    } catch (error) {
      if (!this.tidbFailed)
        process.stderr.write(`statements_summary cannot be read, no TiDB row figures: ${(error as Error).message}\n`);
      this.tidbFailed = true;
      return undefined;
    }
  }

  /** The server threads of the sessions using `database` (MariaDB's processlist has their TID; MySQL's has not). */
  private async sessionThreads(database: string): Promise<Set<number> | undefined> {
    if (this.server.family !== 'mariadb' || this.server.pid === undefined) return undefined;
    try {
      const [rows] = await this.connection.query<RowDataPacket[]>(
        'SELECT TID AS tid FROM information_schema.PROCESSLIST WHERE DB = ?',
        [database],
      );
      return new Set(rows.map((r) => Number(r.tid)));
    } catch {
      return undefined;
    }
  }

  /** The counters now. `database`: the run's own (TiDB's figures and the sessions' threads are per schema). */
  async sample(database: string): Promise<Sample> {
    const counters = this.server.family === 'tidb' ? await this.tidbCounters(database) : await this.statusCounters();
    const wallMs = performance.now();
    const cpu = {
      workerCpuUs: workerCpuUs(),
      countingUs: countingTimeNs() / 1000,
      serverCpuUs: processCpuUs(this.server.pid),
    };
    const parts = this.server.family === 'mariadb' ? threadCpuUs(this.server.pid) : new Map<number, number>();
    return { wallMs, ...cpu, counters, parts, own: await this.sessionThreads(database) };
  }

  delta(from: Sample, to: Sample): CostDelta {
    let counters =
      from.counters !== undefined && to.counters !== undefined ? counterDelta(from.counters, to.counters) : undefined;
    if (counters !== undefined && this.server.family === 'tidb') {
      // The summary was cleared between the samples (tidb_stmt_summary_refresh_interval): the sums mean nothing.
      const windowMoved = (counters.SUMMARY_WINDOW ?? 0) !== 0 && (from.counters?.SUMMARY_WINDOW ?? 0) !== 0;
      delete counters.SUMMARY_WINDOW;
      if (windowMoved) counters = undefined;
    }
    if (counters !== undefined)
      for (const [name, cost] of Object.entries(this.selfCost)) counters[name] = (counters[name] ?? 0) - cost;
    return { ...cpuDelta(from, to), counters };
  }

  async close(): Promise<void> {
    await this.connection.end().catch(() => undefined);
  }
}

function counterDelta(from: Record<string, number>, to: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, value] of Object.entries(to)) out[name] = value - (from[name] ?? 0);
  return out;
}

export function addDeltas(a: CostDelta, b: CostDelta): CostDelta {
  let counters: Record<string, number> | undefined;
  if (a.counters !== undefined && b.counters !== undefined) {
    counters = { ...a.counters };
    for (const [name, v] of Object.entries(b.counters)) counters[name] = (counters[name] ?? 0) + v;
  }
  return {
    wallMs: a.wallMs + b.wallMs,
    workerCpuUs: a.workerCpuUs + b.workerCpuUs,
    countingUs: a.countingUs + b.countingUs,
    serverCpuUs: a.serverCpuUs !== undefined && b.serverCpuUs !== undefined ? a.serverCpuUs + b.serverCpuUs : undefined,
    serverCpuOwnUs:
      a.serverCpuOwnUs !== undefined && b.serverCpuOwnUs !== undefined
        ? a.serverCpuOwnUs + b.serverCpuOwnUs
        : undefined,
    counters,
  };
}

// ---------------------------------------------------------------------------
// PostgreSQL (the graphile-worker comparison): CPU only.

export class PostgresMeter {
  private constructor(
    readonly pid: number | undefined,
    private readonly port: number,
  ) {}

  /** The postmaster behind `pgUrl` (its listener), else the parent of a `postgres` process. */
  static find(pgUrl: string): PostgresMeter {
    const url = new URL(pgUrl);
    const port = Number(url.port || 5432);
    if (!isLocalHost(url.hostname)) return new PostgresMeter(undefined, port);
    let pid = listenerPid(port);
    if (pid === undefined) {
      const candidate = pidByName(['postgres']);
      const parent = candidate === undefined ? undefined : procStat(candidate)?.ppid;
      pid = parent !== undefined && readComm(parent) === 'postgres' ? parent : candidate;
    }
    return new PostgresMeter(pid, port);
  }

  sample(): Sample {
    const wallMs = performance.now();
    const cpu = { workerCpuUs: workerCpuUs(), countingUs: countingTimeNs() / 1000 };
    const parts = childCpuUs(this.pid);
    const own = this.pid === undefined ? undefined : peersOfOwnConnections(this.pid, this.port);
    return { wallMs, ...cpu, serverCpuUs: processTreeCpuUs(this.pid, parts), counters: undefined, parts, own };
  }

  delta(from: Sample, to: Sample): CostDelta {
    return { ...cpuDelta(from, to), counters: undefined };
  }
}
