/**
 * What the SQL server says of a run of the steady workload (bench/workloads/steady.ts): the statements that
 * took over 100 ms (the slow log), and lock waits, deadlocks and statement
 * retries (MariaDB's InnoDB counters; TiDB's statements summary and lock
 * views). Each server's slow log is switched to a 100 ms threshold for the
 * run and put back after.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { RowDataPacket } from 'mysql2/promise';
import { cliFlag, onCleanup, serverUrlOf, withAdmin } from './support.js';

/** The SQL server a run of the steady workload uses: `--server mariadb|tidb`, `--txn` (TiDB). */
export function steadyServer(): { server: 'mariadb' | 'tidb'; txn: string; serverUrl: string } {
  const server = cliFlag('--server') ?? 'mariadb';
  if (server !== 'mariadb' && server !== 'tidb') throw new Error('--server is mariadb or tidb');
  return { server, txn: cliFlag('--txn') ?? 'pessimistic', serverUrl: serverUrlOf(server) };
}

const CHILD = fileURLToPath(new URL('./lanewake-child.mjs', import.meta.url));

/** A bench/lanewake-child.mjs of `part`, killed at exit. LW_CPU_PROF=<dir>: it writes a V8 CPU profile there. */
export function steadyChild(part: 'steady-worker' | 'steady-producer', env: Record<string, string>): ChildProcess {
  const prof = process.env.LW_CPU_PROF;
  const p = fork(CHILD, [part], {
    env: { ...process.env, ...env },
    execArgv: prof ? ['--cpu-prof', '--cpu-prof-dir', prof] : [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  onCleanup(async () => void p.kill('SIGKILL'));
  return p;
}

export interface SlowStatement {
  /** The slowest time of this statement shape. */
  ms: number;
  count: number;
  text: string;
}

export interface LockFigures {
  lockWaits: number;
  lockWaitMs: number;
  deadlocks: number;
  /** TiDB pessimistic: statements run again because their lock met a newer commit. */
  statementRetries: number;
}

const SLOW_MS = 100;

/** Turns the slow log to SLOW_MS for the run (once), and back at the end. */
async function slowLogOn(server: string, url: string): Promise<void> {
  if (server === 'tidb') {
    const [rows] = await withAdmin(
      (c) => c.query<RowDataPacket[]>('SELECT @@global.tidb_slow_log_threshold AS v'),
      url,
    );
    const was = Number(rows[0]?.v);
    await withAdmin((c) => c.query(`SET GLOBAL tidb_slow_log_threshold = ${SLOW_MS}`), url);
    onCleanup(() =>
      withAdmin((c) => c.query(`SET GLOBAL tidb_slow_log_threshold = ${was}`), url).then(() => undefined),
    );
    return;
  }
  const [rows] = await withAdmin(
    (c) =>
      c.query<RowDataPacket[]>(
        'SELECT @@global.long_query_time AS t, @@global.slow_query_log AS on_, @@global.log_output AS o',
      ),
    url,
  );
  const was = rows[0] as { t: number; on_: number; o: string };
  await withAdmin(
    (c) =>
      c.query(`SET GLOBAL long_query_time = ${SLOW_MS / 1000}, GLOBAL log_output = 'TABLE', GLOBAL slow_query_log = 1`),
    url,
  );
  onCleanup(() =>
    withAdmin(
      (c) =>
        c.query(
          `SET GLOBAL long_query_time = ${Number(was.t)}, GLOBAL log_output = ` +
            `${c.escape(was.o)}, GLOBAL slow_query_log = ${Number(was.on_)}`,
        ),
      url,
    ).then(() => undefined),
  );
}

let slowLogSet = false;

/** Lock counters now (deltas between two calls are the run's). Switches the slow log on at the first call. */
export async function lockFigures(server: string, url: string, database: string): Promise<LockFigures> {
  if (!slowLogSet) {
    slowLogSet = true;
    await slowLogOn(server, url);
  }
  if (server === 'tidb') {
    const [summary] = await withAdmin(
      (c) =>
        c.query<RowDataPacket[]>(
          'SELECT COALESCE(SUM(SUM_EXEC_RETRY), 0) AS retries FROM ' +
            'information_schema.statements_summary WHERE SCHEMA_NAME = ?',
          [database],
        ),
      url,
    );
    const [deadlocks] = await withAdmin(
      (c) => c.query<RowDataPacket[]>('SELECT COUNT(DISTINCT DEADLOCK_ID) AS n FROM information_schema.deadlocks'),
      url,
    );
    // TiDB keeps no count of lock waits: the slow log's LockKeys_time of the run stands for them (slowStatements).
    return {
      lockWaits: 0,
      lockWaitMs: 0,
      deadlocks: Number(deadlocks[0]?.n ?? 0),
      statementRetries: Number(summary[0]?.retries ?? 0),
    };
  }
  const [rows] = await withAdmin(
    (c) =>
      c.query<RowDataPacket[]>(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_row_lock_waits', " +
          "'Innodb_row_lock_time', 'Innodb_deadlocks')",
      ),
    url,
  );
  const v = (name: string): number => Number(rows.find((r) => r.Variable_name === name)?.Value ?? 0);
  return {
    lockWaits: v('Innodb_row_lock_waits'),
    lockWaitMs: v('Innodb_row_lock_time'),
    deadlocks: v('Innodb_deadlocks'),
    statementRetries: 0,
  };
}

/**
 * TiDB keeps no count of lock waits, only the ones going on now
 * (`information_schema.data_lock_waits`): this looks every 20 ms from
 * start() to stop() and counts the distinct waits it saw (a transaction
 * waiting on a key), and for how many looks the longest was seen. A wait
 * shorter than the interval may be missed; one of 100 ms shows in five looks.
 */
export class TidbLockWaitSampler {
  private readonly seen = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private looking: Promise<void> | undefined;

  constructor(private readonly url: string) {}

  start(): void {
    this.timer = setInterval(() => {
      if (this.looking) return;
      this.looking = withAdmin(
        (c) => c.query<RowDataPacket[]>('SELECT `KEY` AS k, TRX_ID AS t FROM information_schema.data_lock_waits'),
        this.url,
      )
        .then(([rows]) => {
          for (const r of rows) {
            const id = `${String(r.t)}:${String(r.k)}`;
            this.seen.set(id, (this.seen.get(id) ?? 0) + 1);
          }
        })
        .catch(() => undefined)
        .finally(() => (this.looking = undefined));
    }, 20);
  }

  async stop(): Promise<{ waits: number; longestLooks: number }> {
    clearInterval(this.timer);
    await this.looking;
    return { waits: this.seen.size, longestLooks: Math.max(0, ...this.seen.values()) };
  }
}

/** The run's statements over SLOW_MS on `database`, by shape, slowest first. */
export async function slowStatements(
  server: string,
  url: string,
  database: string,
  from: Date,
  to: Date,
): Promise<SlowStatement[]> {
  const rows =
    server === 'tidb'
      ? (
          await withAdmin(
            (c) =>
              c.query<RowDataPacket[]>(
                `SELECT Query_time * 1000 AS ms, Digest AS shape, LEFT(Query, 140) AS text, Exec_retry_count AS retries,
                  LockKeys_time * 1000 AS lock_ms
                 FROM information_schema.slow_query WHERE Time BETWEEN ? AND ? AND DB = ? AND Is_internal = 0 AND
                 Query_time * 1000 >= ?`,
                [from, new Date(to.getTime() + 1000), database, SLOW_MS],
              ),
            url,
          )
        )[0]
      : (
          await withAdmin(
            (c) =>
              c.query<RowDataPacket[]>(
                `SELECT TIME_TO_SEC(query_time) * 1000 AS ms, LEFT(sql_text, 60) AS shape, LEFT(sql_text, 140) AS text,
                  0 AS retries, TIME_TO_SEC(lock_time) * 1000 AS lock_ms
                 FROM mysql.slow_log WHERE start_time BETWEEN ? AND ? AND db = ?`,
                [from, new Date(to.getTime() + 1000), database],
              ),
            url,
          )
        )[0];
  const byShape = new Map<string, SlowStatement>();
  for (const r of rows) {
    const key = String(r.shape);
    const ms = Number(r.ms);
    const note =
      Number(r.retries) > 0 || Number(r.lock_ms) > 1
        ? ` [retries ${Number(r.retries)}, lock ${Number(r.lock_ms).toFixed(0)} ms]`
        : '';
    const s = byShape.get(key);
    if (s) {
      s.count++;
      if (ms > s.ms) Object.assign(s, { ms, text: `${String(r.text).replace(/\s+/g, ' ')}${note}` });
    } else byShape.set(key, { ms, count: 1, text: `${String(r.text).replace(/\s+/g, ' ')}${note}` });
  }
  return [...byShape.values()].sort((a, b) => b.ms - a.ms);
}
