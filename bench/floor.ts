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
 * Every clock stops when the store counts every item completed, as
 * bench/compare.ts's do: the floor's when its completion UPDATEs (each its
 * own transaction) have reported every row; the engine's when
 * `SELECT COUNT(*) … state = 'completed'` reaches the item count; the peer's
 * when its adapter's completedCount() does.
 *
 * This file is the CLI, the runs and the report; the layouts and their
 * statements are in floor-layouts.ts, the engine's and the peer's drains in
 * floor-stacks.ts.
 *
 * Server: LANEWAKE_BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306).
 * Output: a table on stdout, then bench/results/floor-latest.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import mysql from 'mysql2/promise';
import { execFileSync } from 'node:child_process';
import type * as Lanewake from '../src/index.js';
import {
  codeRevision,
  cpuSample,
  createBenchDatabase,
  fmt,
  median,
  minMax,
  printTable,
  progress,
  runCleanups,
  waitForQuiet,
} from './support.js';
import { LAYOUTS, QUEUE, applyLayout, drainFloor, type Layout } from './floor-layouts.js';
import { ENGINE_CONCURRENCY, ENQUEUE_BATCH, TYPE, drainEngine, runPeer, type RunResult } from './floor-stacks.js';

// The engine runs from its compiled package, as users run it and as bench/compare.ts runs it.
progress('building dist/ (npm run build)');
execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
const lanewake = (await import(new URL('../dist/index.js', import.meta.url).href)) as typeof Lanewake;
const { Ledger, Producer } = lanewake;
type Ledger = Lanewake.Ledger;

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
  const layouts = values.layouts
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  for (const l of layouts)
    if (!(LAYOUTS as readonly string[]).includes(l))
      throw new Error(`--layouts: unknown layout ${l} (${LAYOUTS.join(', ')})`);
  const colon = values.peer.indexOf(':');
  if (values.peer !== 'none' && colon <= 0)
    throw new Error('--peer must be system:mode (as in `npm run bench -- --systems`) or none');
  return {
    runs: int('runs', values.runs, 1),
    items: int('items', values.items, 1000),
    batch: int('batch', values.batch, 1),
    connections: int('connections', values.connections, 1),
    layouts: layouts as Layout[],
    engine: !values['no-engine'],
    peer:
      values.peer === 'none' ? undefined : { system: values.peer.slice(0, colon), mode: values.peer.slice(colon + 1) },
    json: values.json,
  };
}

// ---------------------------------------------------------------------------

async function runOnce(subject: Subject, opts: Options): Promise<RunResult> {
  if (subject === 'peer') return runPeer(opts.peer!, opts.items);
  const db = await createBenchDatabase('lwfloor');
  let ledger: Ledger | undefined = new Ledger({ url: db.url, poolSize: 12 });
  try {
    await ledger.migrate();
    const producer = new Producer({ ledger });
    const ids: string[] = [];
    for (let i = 0; i < opts.items; i += ENQUEUE_BATCH) {
      const batch = Array.from({ length: Math.min(ENQUEUE_BATCH, opts.items - i) }, (_, k) => ({
        queue: QUEUE,
        type: TYPE,
        payload: { n: i + k },
      }));
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
    const to =
      subject === 'engine'
        ? await drainEngine(lanewake, ledger!, opts.items, completed)
        : await drainFloor(db.url, subject, opts, completed);
    // Effect check: every enqueued item completed exactly once, nothing else.
    const missing = ids.filter((id) => completed.get(id) !== 1);
    if (missing.length > 0 || completed.size !== ids.length) {
      throw new Error(
        `${subject}: ${missing.length} items not completed exactly once, ${completed.size} distinct completed of ${ids.length}`,
      );
    }
    const seconds = (to.wallMs - from.wallMs) / 1000;
    return {
      jobsPerS: opts.items / seconds,
      serverUsPerJob:
        from.server !== undefined && to.server !== undefined
          ? ((to.server - from.server) * 1e6) / opts.items
          : undefined,
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
  const subjects: Subject[] = [
    ...opts.layouts,
    ...(opts.engine ? (['engine'] as const) : []),
    ...(opts.peer ? (['peer'] as const) : []),
  ];
  const peerLabel = opts.peer ? `${opts.peer.system} (${opts.peer.mode}), c=${ENGINE_CONCURRENCY}` : '';
  const results = new Map<Subject, RunResult[]>(subjects.map((s) => [s, []]));
  progress(
    `ledger floor: ${subjects.map((x) => (x === 'peer' ? peerLabel : x)).join(', ')}; ${opts.items} items, batch ${opts.batch}, ${opts.connections} connection(s), ${opts.runs} run(s)`,
  );
  // Subjects interleaved within each run, so machine noise falls on all of them alike.
  for (let run = 1; run <= opts.runs; run++) {
    for (const subject of subjects) {
      const r = await runOnce(subject, opts);
      results.get(subject)!.push(r);
      progress(
        `run ${run} ${subject === 'peer' ? peerLabel : subject}: ${fmt(r.jobsPerS)} jobs/s, server ${fmt(r.serverUsPerJob, 1)} µs/job, node ${fmt(r.nodeUsPerJob, 1)} µs/job`,
      );
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
      r.subject === 'engine'
        ? `engine (Consumer, c=${ENGINE_CONCURRENCY})`
        : r.subject === 'peer'
          ? `peer: ${peerLabel}`
          : `floor: ${r.subject}`,
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
