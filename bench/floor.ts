/**
 * The ledger's SQL floor (issue 5): how many no-op jobs per second the
 * processing path's statements allow on this server with nothing around
 * them, next to the engine draining the same items in the same invocation.
 * It answers two questions the side-by-side table cannot:
 *
 *   - how close the engine runs to what its own SQL allows here
 *     ("engine / floor"), so the rest of the gap to a peer is the ledger's;
 *   - how much a different table layout would buy, before anyone writes the
 *     migration: each layout below is the current schema changed by ALTER
 *     TABLE after the enqueue, drained by the statements that layout needs;
 *   - where the floor stands against a peer's whole stack, drained in the
 *     same invocation (default graphile-worker with its local queue and
 *     batched completion, through the side-by-side benchmark's adapter;
 *     `--peer none` leaves it out).
 *
 *   npm run bench:floor                                  # 3 runs, every layout, and the engine
 *   npm run bench:floor -- --runs 5 --connections 2 --layouts current,schema-1 --peer none
 *   npm run bench:floor -- --json                        # last stdout line: one JSON object
 *
 * Layouts (only `current` is what lanewake runs; the others are measurements
 * of other schemas, not code paths of the engine):
 *   current      the schema as `ledger.migrate()` makes it (schema 2: the
 *                columns claim and completion write are fixed-width and NOT
 *                NULL, so InnoDB updates rows in place; purge goes by
 *                creation time, so completion moves no terminal-time index
 *                entry)
 *   schema-1     the layout before migration 2, for comparison: nullable,
 *                variable-length lease columns and a terminal-time index
 *   claim-flag   current, and a claim index without `state`: a claim clears
 *                is_head, so a completion changes no index at all.
 *                Reclaiming expired leases, the claim limiter and the
 *                per-state stats would then need another way to find leased
 *                items than the claim index's processing range.
 *
 * The floor's statements are the engine's (src/ledger/sql/claim.ts and
 * complete-batch.ts) written out for each layout: a candidate read of twice
 * the batch, the CAS UPDATE and its read-back in one round trip, and one
 * completion UPDATE per claimed batch, on `--connections` connections at
 * once. Every run checks that each item was completed exactly once.
 *
 * Server: LANEWAKE_BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306).
 * Output: a table on stdout, then bench/results/floor-latest.json.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import mysql, { type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';
import { execFileSync } from 'node:child_process';
import type * as Lanewake from '../src/index.js';
import {
  codeRevision,
  cpuSample,
  postgresCpuSeconds,
  createBenchDatabase,
  fmt,
  isInterrupted,
  median,
  minMax,
  printTable,
  progress,
  runCleanups,
  onCleanup,
  waitForQuiet,
  type BenchDatabase,
} from './support.js';
import { findFactory } from './peers/registry.js';
import { CLAIMED_COLUMN_LIST, NO_TIME_TEXT as NO_TIME } from '../src/ledger/internal.js';

// The engine runs from its compiled package, as users run it and as bench/compare.ts runs it.
progress('building dist/ (npm run build)');
execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
const { Consumer, Ledger, Producer, createLogger } = (await import(new URL('../dist/index.js', import.meta.url).href)) as typeof Lanewake;
type Ledger = Lanewake.Ledger;

const QUEUE = 'bench';
const TYPE = 'noop';
const ENQUEUE_BATCH = 500;
const ENGINE_CONCURRENCY = 32;
/** A drain that completes nothing for this long fails the run instead of hanging it. */
const STALL_MS = 60_000;

const LAYOUTS = ['current', 'schema-1', 'claim-flag'] as const;
type Layout = (typeof LAYOUTS)[number];
type Subject = Layout | 'engine' | 'peer';
const DEFAULT_PEER = 'graphile-worker:local queue + batched completion';

interface Options {
  runs: number;
  items: number;
  batch: number;
  connections: number;
  layouts: readonly Layout[];
  engine: boolean;
  /** system:mode of a side-by-side adapter, or undefined for none. */
  peer: { system: string; mode: string } | undefined;
  json: boolean;
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      runs: { type: 'string', default: '3' },
      items: { type: 'string', default: '20000' },
      batch: { type: 'string', default: '500' },
      connections: { type: 'string', default: '2' },
      layouts: { type: 'string', default: LAYOUTS.join(',') },
      'no-engine': { type: 'boolean', default: false },
      peer: { type: 'string', default: DEFAULT_PEER },
      json: { type: 'boolean', default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  const int = (name: string, raw: string, min: number): number => {
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer ≥ ${min}`);
    return n;
  };
  const layouts = values.layouts.split(',').map((s) => s.trim()).filter((s) => s !== '');
  for (const l of layouts) if (!(LAYOUTS as readonly string[]).includes(l)) throw new Error(`--layouts: unknown layout ${l} (${LAYOUTS.join(', ')})`);
  const colon = values.peer.indexOf(':');
  if (values.peer !== 'none' && colon <= 0) throw new Error('--peer must be system:mode (as in `npm run bench -- --systems`) or none');
  return {
    runs: int('runs', values.runs, 1),
    items: int('items', values.items, 1000),
    batch: int('batch', values.batch, 1),
    connections: int('connections', values.connections, 1),
    layouts: layouts as Layout[],
    engine: !values['no-engine'],
    peer: values.peer === 'none' ? undefined : { system: values.peer.slice(0, colon), mode: values.peer.slice(colon + 1) },
    json: values.json,
  };
}

interface RunResult {
  jobsPerS: number;
  /** The database server's CPU per job, µs: mariadbd, or postgres for a PostgreSQL peer (undefined when not visible). */
  serverUsPerJob: number | undefined;
  nodeUsPerJob: number;
}

/** Peers whose server's CPU this benchmark can read: all their `postgres` processes. */
const POSTGRES_PEERS = new Set(['graphile-worker', 'pg-boss']);

// ---------------------------------------------------------------------------
// Layouts: the ALTER that makes each, and the statements that drain it.

const ASCII = 'CHARACTER SET ascii COLLATE ascii_bin';

async function applyLayout(c: mysql.Connection, layout: Layout): Promise<void> {
  if (layout === 'current') return;
  if (layout === 'claim-flag') {
    await c.query('ALTER TABLE lw_items DROP INDEX ix_claim, ADD INDEX ix_claim (queue, queue_class, is_head, priority, run_after)');
  } else if (layout === 'schema-1') {
    // Schema 1's column definitions and indexes, then its NULLs for "none".
    await c.query(`ALTER TABLE lw_items MODIFY state VARCHAR(16) ${ASCII} NOT NULL, MODIFY lease_token VARCHAR(32) ${ASCII} NULL,
      MODIFY lease_owner VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, MODIFY lease_until DATETIME(6) NULL,
      MODIFY started_at DATETIME(6) NULL, MODIFY terminal_at DATETIME(6) NULL, ADD INDEX ix_terminal (terminal_at), DROP INDEX ix_created`);
    await c.query(`UPDATE lw_items SET lease_token = NULLIF(lease_token, ''), lease_owner = NULLIF(lease_owner, ''),
      lease_until = NULLIF(lease_until, ${NO_TIME}), started_at = NULLIF(started_at, ${NO_TIME}), terminal_at = NULLIF(terminal_at, ${NO_TIME})`);
  }
}

function drainStatements(layout: Layout) {
  const flag = layout === 'claim-flag';
  const claimable = flag ? 'is_head = 1' : "state = 'pending' AND is_head = 1";
  const noLease = layout === 'schema-1' ? 'NULL' : NO_TIME;
  return {
    candidates: (batch: number) => `SELECT id FROM lw_items WHERE queue = '${QUEUE}' AND queue_class = 'default' AND ${claimable}
      AND run_after <= NOW(6) ORDER BY priority, run_after LIMIT ${batch * 2}`,
    claim: (ids: string, token: string) => `UPDATE lw_items SET ${flag ? 'is_head = 0, ' : ''}state = 'processing', lease_token = '${token}',
      lease_owner = 'floor', lease_until = NOW(6) + INTERVAL 30 SECOND, attempt = attempt + 1, epoch = NULL, cancel_requested = 0,
      started_at = NOW(6), updated_at = NOW(6)
      WHERE id IN (${ids}) AND queue = '${QUEUE}' AND ${claimable} AND run_after <= NOW(6);
      SELECT ${CLAIMED_COLUMN_LIST} FROM lw_items WHERE id IN (${ids}) AND lease_token = '${token}' AND state = 'processing'`,
    complete: (ids: string, token: string) => `UPDATE lw_items SET state = 'completed', result = NULL, lease_until = ${noLease},
      terminal_at = NOW(6), updated_at = NOW(6) WHERE id IN (${ids}) AND lease_token = '${token}' AND state = 'processing'`,
  };
}

/** Picks `n` of the candidates at random, as the engine's claim does, so concurrent claimers collide as they would. */
function pick<T>(rows: readonly T[], n: number): T[] {
  const a = [...rows];
  for (let i = 0; i < Math.min(n, a.length); i++) {
    const j = i + Math.floor(Math.random() * (a.length - i));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a.slice(0, n);
}

async function drainFloor(db: BenchDatabase, layout: Layout, opts: Options, completedIds: Map<string, number>): Promise<void> {
  const s = drainStatements(layout);
  const conns = await Promise.all(
    Array.from({ length: opts.connections }, () => mysql.createConnection({ uri: db.url, multipleStatements: true })),
  );
  let lastProgress = Date.now();
  try {
    await Promise.all(
      conns.map(async (c) => {
        for (;;) {
          if (isInterrupted()) throw new Error('interrupted');
          if (Date.now() - lastProgress > STALL_MS) throw new Error(`no completion for ${STALL_MS} ms`);
          const [candidates] = await c.query<RowDataPacket[]>(s.candidates(opts.batch));
          if (candidates.length === 0) return;
          const chosen = pick(candidates, opts.batch).map((r) => `'${String(r.id)}'`);
          const token = randomBytes(16).toString('base64url');
          const [claimed] = (await c.query(s.claim(chosen.join(','), token))) as unknown as [[ResultSetHeader, RowDataPacket[]]];
          const won = claimed[1].map((r) => String(r.id));
          if (won.length === 0) continue;
          const [done] = await c.query<ResultSetHeader>(s.complete(won.map((id) => `'${id}'`).join(','), token));
          if (done.affectedRows !== won.length) throw new Error(`completed ${done.affectedRows} of ${won.length} claimed items`);
          for (const id of won) completedIds.set(id, (completedIds.get(id) ?? 0) + 1);
          lastProgress = Date.now();
        }
      }),
    );
  } finally {
    await Promise.all(conns.map((c) => c.end().catch(() => undefined)));
  }
}

/**
 * Counts starts until `total`; `finished` resolves then, or rejects when
 * STALL_MS pass without one (a lost job would otherwise hang the run).
 * `stop()` ends the watch.
 */
function watchStarts(total: number, who: string): { started: () => void; finished: Promise<void>; stop: () => void } {
  let seen = 0;
  let last = -1;
  let done!: () => void;
  let fail!: (e: Error) => void;
  const finished = new Promise<void>((resolve, reject) => {
    done = resolve;
    fail = reject;
  });
  const watchdog = setInterval(() => {
    if (seen === last) fail(new Error(`${who}: no job started for ${STALL_MS} ms (${seen} of ${total})`));
    last = seen;
  }, STALL_MS);
  return {
    started: () => {
      if (++seen === total) done();
    },
    finished,
    stop: () => clearInterval(watchdog),
  };
}

async function drainEngine(ledger: Ledger, items: number, completedIds: Map<string, number>): Promise<void> {
  const watch = watchStarts(items, 'engine');
  const consumer = new Consumer({
    ledger,
    queue: QUEUE,
    concurrency: ENGINE_CONCURRENCY,
    logger: createLogger('bench.floor', 'warn'),
    handlers: {
      [TYPE]: async (job: { id: string }) => {
        completedIds.set(job.id, (completedIds.get(job.id) ?? 0) + 1);
        watch.started();
      },
    },
  });
  try {
    await consumer.start();
    await watch.finished;
  } finally {
    watch.stop();
    await consumer.stop();
  }
}

/**
 * The peer's whole stack on the same items: enqueued with its batch API in
 * batches of 500 (untimed), then one worker at concurrency 32 in this process,
 * timed from its start until every job has started (the side-by-side bulk
 * workload's processing figure). Each job must start exactly once.
 */
async function runPeer(peer: { system: string; mode: string }, opts: Options): Promise<RunResult> {
  const factory = await findFactory(peer.system, peer.mode);
  const adapter = factory.create({ id: `flr${randomBytes(4).toString('hex')}` });
  const unregister = onCleanup(() => adapter.teardown());
  try {
    await adapter.setup();
    await adapter.connect();
    for (let i = 0; i < opts.items; i += ENQUEUE_BATCH) {
      await adapter.enqueueBatch(Array.from({ length: Math.min(ENQUEUE_BATCH, opts.items - i) }, (_, k) => ({ n: i + k })));
    }
    await waitForQuiet();
    const starts = new Uint8Array(opts.items);
    const watch = watchStarts(opts.items, peer.system);
    const serverCpu = POSTGRES_PEERS.has(peer.system) ? postgresCpuSeconds : () => undefined;
    const serverFrom = serverCpu();
    const from = cpuSample();
    const worker = await adapter.startWorker({
      concurrency: ENGINE_CONCURRENCY,
      onJob: (job) => {
        starts[job.n] = (starts[job.n] ?? 0) + 1;
        watch.started();
      },
    });
    try {
      await watch.finished;
    } finally {
      watch.stop();
    }
    const to = cpuSample();
    const serverTo = serverCpu();
    await worker.stop();
    const wrong = starts.reduce((n, c) => n + (c === 1 ? 0 : 1), 0);
    if (wrong > 0) throw new Error(`${peer.system}: ${wrong} jobs not started exactly once`);
    return {
      jobsPerS: opts.items / ((to.wallMs - from.wallMs) / 1000),
      serverUsPerJob: serverFrom !== undefined && serverTo !== undefined ? ((serverTo - serverFrom) * 1e6) / opts.items : undefined,
      nodeUsPerJob: ((to.node - from.node) * 1e6) / opts.items,
    };
  } finally {
    await adapter.close().catch(() => undefined);
    await adapter.teardown();
    unregister();
  }
}

// ---------------------------------------------------------------------------

async function runOnce(subject: Subject, opts: Options): Promise<RunResult> {
  if (subject === 'peer') return runPeer(opts.peer!, opts);
  const db = await createBenchDatabase('lwfloor');
  let ledger: Ledger | undefined = new Ledger({ url: db.url, poolSize: 12 });
  try {
    await ledger.migrate();
    const producer = new Producer({ ledger });
    const ids: string[] = [];
    for (let i = 0; i < opts.items; i += ENQUEUE_BATCH) {
      const batch = Array.from({ length: Math.min(ENQUEUE_BATCH, opts.items - i) }, (_, k) => ({ queue: QUEUE, type: TYPE, payload: { n: i + k } }));
      for (const r of await producer.enqueueMany(batch)) ids.push(r.id);
    }
    if (subject !== 'engine') {
      await ledger.close();
      ledger = undefined;
      const admin = await mysql.createConnection({ uri: db.url });
      try {
        await applyLayout(admin, subject);
      } finally {
        await admin.end();
      }
    }
    await waitForQuiet();
    const completed = new Map<string, number>();
    const from = cpuSample();
    if (subject === 'engine') await drainEngine(ledger!, opts.items, completed);
    else await drainFloor(db, subject, opts, completed);
    const to = cpuSample();
    // Effect check: every enqueued item completed exactly once, nothing else.
    const missing = ids.filter((id) => completed.get(id) !== 1);
    if (missing.length > 0 || completed.size !== ids.length) {
      throw new Error(`${subject}: ${missing.length} items not completed exactly once, ${completed.size} distinct completed of ${ids.length}`);
    }
    const seconds = (to.wallMs - from.wallMs) / 1000;
    return {
      jobsPerS: opts.items / seconds,
      serverUsPerJob: from.server !== undefined && to.server !== undefined ? ((to.server - from.server) * 1e6) / opts.items : undefined,
      nodeUsPerJob: ((to.node - from.node) * 1e6) / opts.items,
    };
  } finally {
    await ledger?.close();
    await db.drop();
  }
}

interface Row {
  subject: Subject;
  median: number;
  min: number;
  max: number;
  serverUsPerJob: number | undefined;
  nodeUsPerJob: number;
  runs: number[];
}

async function main(): Promise<void> {
  const opts = parseOptions();
  const subjects: Subject[] = [...opts.layouts, ...(opts.engine ? (['engine'] as const) : []), ...(opts.peer ? (['peer'] as const) : [])];
  const peerLabel = opts.peer ? `${opts.peer.system} (${opts.peer.mode}), c=${ENGINE_CONCURRENCY}` : '';
  const results = new Map<Subject, RunResult[]>(subjects.map((s) => [s, []]));
  progress(`ledger floor: ${subjects.map((x) => (x === 'peer' ? peerLabel : x)).join(', ')}; ${opts.items} items, batch ${opts.batch}, ${opts.connections} connection(s), ${opts.runs} run(s)`);
  // Subjects interleaved within each run, so machine noise falls on all of them alike.
  for (let run = 1; run <= opts.runs; run++) {
    for (const subject of subjects) {
      const r = await runOnce(subject, opts);
      results.get(subject)!.push(r);
      progress(`run ${run} ${subject === 'peer' ? peerLabel : subject}: ${fmt(r.jobsPerS)} jobs/s, server ${fmt(r.serverUsPerJob, 1)} µs/job, node ${fmt(r.nodeUsPerJob, 1)} µs/job`);
    }
  }
  const rows: Row[] = subjects.map((subject) => {
    const rs = results.get(subject)!;
    const jobs = rs.map((r) => r.jobsPerS);
    const server = rs.map((r) => r.serverUsPerJob).filter((v): v is number => v !== undefined);
    return {
      subject,
      median: median(jobs),
      ...minMax(jobs),
      serverUsPerJob: server.length > 0 ? median(server) : undefined,
      nodeUsPerJob: median(rs.map((r) => r.nodeUsPerJob)),
      runs: jobs,
    };
  });
  const current = rows.find((r) => r.subject === 'current')?.median;
  printTable(
    `ledger floor — median of ${opts.runs} run(s), ${opts.items} items, batch ${opts.batch}, ${opts.connections} connection(s)`,
    ['subject', 'jobs/s', 'min–max', 'server µs/job', 'node µs/job', 'server + node µs/job', 'vs current floor'],
    rows.map((r) => [
      r.subject === 'engine' ? `engine (Consumer, c=${ENGINE_CONCURRENCY})` : r.subject === 'peer' ? `peer: ${peerLabel}` : `floor: ${r.subject}`,
      fmt(r.median),
      `${fmt(r.min)}–${fmt(r.max)}`,
      fmt(r.serverUsPerJob, 1),
      fmt(r.nodeUsPerJob, 1),
      r.serverUsPerJob === undefined ? '—' : fmt(r.serverUsPerJob + r.nodeUsPerJob, 1),
      current === undefined ? '' : `${(r.median / current).toFixed(2)}×`,
    ]),
    ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
  );
  const out = {
    format: 'lanewake-floor/1',
    date: new Date().toISOString(),
    code: codeRevision(),
    command: `npm run bench:floor -- ${process.argv.slice(2).join(' ')}`.trim(),
    options: { ...opts, layouts: [...opts.layouts] },
    peer: peerLabel || undefined,
    rows,
  };
  const path = join(dirname(fileURLToPath(import.meta.url)), 'results', 'floor-latest.json');
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, `${JSON.stringify(out, null, 2)}\n`);
  progress(`wrote ${path}`);
  if (opts.json) console.log(JSON.stringify(out));
}

main()
  .catch((error: unknown) => {
    console.error(error instanceof Error ? error.message : error);
    process.exitCode = 1;
  })
  .finally(() => runCleanups());
