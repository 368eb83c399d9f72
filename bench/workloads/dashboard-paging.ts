/**
 * Dashboard paging (docs/BENCHMARKS.md, "Dashboard paging"): the dashboard's reads on a ledger of `--rows` items
 * (default 1,000,000), half in the queue read, half in another queue interleaved with it in time; of the queue's
 * items 90% completed, 1% dead, the rest pending. Per read: the first page, a page deep in (the 1,000th of 200
 * items, `--deep-pages`, or as deep as the walk gets), the p50 and p99 of every page walked, and the EXPLAIN of
 * each statement the read sent (MariaDB: access type and key). The table is filled fast rather than
 * realistically: 20,000 items enqueued through the ledger, then copied in chunks of 20,000 with new ids and
 * creation times ten minutes further back each chunk. `--keep` leaves the database (lwdash_kept) for a look.
 */
import { performance } from 'node:perf_hooks';
import { CompiledQuery, Kysely, MysqlDialect, sql } from 'kysely';
import { parseLedgerConfig } from '../../src/ledger/config.js';
import { createLedgerPool } from '../../src/ledger/connection.js';
import { Ledger } from '../../src/ledger/ledger.js';
import type { ItemFilter } from '../../src/ledger/operator-types.js';
import {
  benchServerUrl,
  cliFlag,
  codeRevision,
  createBenchDatabase,
  fmt,
  percentile,
  progress,
  withAdmin,
} from '../support.js';
import { defineWorkload } from '../workload.js';

const ROWS = Number(cliFlag('--rows') ?? 1_000_000);
const SEED = 20_000;
const DEEP_PAGES = Number(cliFlag('--deep-pages') ?? 1000);
const PAGE = 200;
const QUEUE = 'bench';

interface Captured {
  sql: string;
  parameters: readonly unknown[];
}

async function fill(ledger: Ledger, db: Kysely<Record<string, never>>): Promise<void> {
  progress(`seeding ${fmt(SEED)} items`);
  for (let i = 0; i < SEED; i += 2000) {
    await ledger.enqueueMany(
      Array.from({ length: 2000 }, (_, k) => ({
        queue: (i + k) % 2 === 0 ? QUEUE : 'other',
        type: (i + k) % 4 < 2 ? 'a' : 'b',
        payload: { n: i + k },
      })),
    );
  }
  // States as a long-running queue has them: most ended, a few dead, some waiting.
  await sql`UPDATE lw_items SET state = 'completed', started_at = created_at,
    terminal_at = created_at + INTERVAL 1 SECOND WHERE CRC32(id) % 100 < 90`.execute(db);
  await sql`UPDATE lw_items SET state = 'dead', attempt = 1, failure_class = 'permanent', last_error = 'boom',
    started_at = created_at,
    terminal_at = created_at + INTERVAL 1 SECOND WHERE CRC32(id) % 100 = 90`.execute(db);
  const cols = await sql<{ name: string }>`SELECT column_name AS name FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'lw_items' ORDER BY ordinal_position`.execute(db);
  const names = cols.rows.map((c) => String(c.name));
  // Copies of the seed in chunks of its size, each with new ids and times ten minutes further back: small
  // statements, no sort of the growing table, so 10,000,000 rows fill at the server's insert rate.
  await sql`CREATE TABLE lw_seed AS SELECT * FROM lw_items`.execute(db);
  const t0 = performance.now();
  for (let chunk = 1, rows = SEED; rows < ROWS; chunk++) {
    const take = Math.min(SEED, ROWS - rows);
    if (chunk % 25 === 0) progress(`${fmt(rows)} rows, ${fmt(rows / ((performance.now() - t0) / 1000))} rows/s`);
    const back = `INTERVAL ${chunk * 10} MINUTE`;
    const exprs = names.map((n) =>
      n === 'id'
        ? `REPLACE(REPLACE(LEFT(TO_BASE64(UNHEX(MD5(CONCAT(id, '.${chunk}')))), 22), '+', '-'), '/', '_')`
        : n === 'created_at' || n === 'run_after' || n === 'updated_at'
          ? `${n} - ${back}`
          : n === 'started_at' || n === 'terminal_at'
            ? `IF(${n} > '1000-01-01 00:00:00', ${n} - ${back}, ${n})`
            : n === 'idempotency_key'
              ? 'NULL'
              : n,
    );
    await sql
      .raw(`INSERT INTO lw_items (${names.join(', ')}) SELECT ${exprs.join(', ')} FROM lw_seed LIMIT ${take}`)
      .execute(db);
    rows += take;
  }
  await sql`DROP TABLE lw_seed`.execute(db);
  await sql`ANALYZE TABLE lw_items`.execute(db);
}

interface Measured {
  label: string;
  firstMs: number;
  deepMs: number;
  deepPage: number;
  p50: number;
  p99: number;
  found: number;
  plans: string[];
}

async function explain(db: Kysely<Record<string, never>>, q: Captured): Promise<string> {
  const r = await db.executeQuery<Record<string, unknown>>(CompiledQuery.raw(`EXPLAIN ${q.sql}`, [...q.parameters]));
  return r.rows.map((row) => `${String(row.table)}:${String(row.type)}/${String(row.key ?? '-')}`).join(' ');
}

async function walk(
  ledger: Ledger,
  db: Kysely<Record<string, never>>,
  captured: Captured[],
  label: string,
  filter: ItemFilter,
): Promise<Measured> {
  const times: number[] = [];
  let found = 0;
  let plans: string[] = [];
  let after: string | undefined;
  for (let page = 0; page < DEEP_PAGES; page++) {
    captured.length = 0;
    const t0 = performance.now();
    const r = await ledger.operator.items(filter, { after, limit: PAGE });
    times.push(performance.now() - t0);
    found += r.items.length;
    if (page === 0) plans = await Promise.all(captured.map((q) => explain(db, q)));
    if (r.next === null) break;
    after = r.next;
  }
  const sorted = [...times].sort((a, b) => a - b);
  return {
    label,
    firstMs: times[0] ?? 0,
    deepMs: times.at(-1) ?? 0,
    deepPage: times.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    found,
    plans,
  };
}

async function timed(
  label: string,
  db: Kysely<Record<string, never>>,
  captured: Captured[],
  fn: () => Promise<unknown>,
): Promise<Measured> {
  captured.length = 0;
  const t0 = performance.now();
  await fn();
  const ms = performance.now() - t0;
  const plans = await Promise.all(captured.map((q) => explain(db, q)));
  return { label, firstMs: ms, deepMs: Number.NaN, deepPage: 1, p50: ms, p99: ms, found: 0, plans };
}

async function measure(): Promise<Measured[]> {
  // --keep: a database of a fixed name, left for a look with EXPLAIN afterwards (dropped first if there).
  const kept = process.argv.includes('--keep') ? 'lwdash_kept' : undefined;
  if (kept)
    await withAdmin(async (c) =>
      c.query(`DROP DATABASE IF EXISTS ${kept}`).then(() => c.query(`CREATE DATABASE ${kept}`)),
    );
  const bench = kept
    ? { name: kept, url: `${benchServerUrl()}/${kept}`, drop: async () => undefined }
    : await createBenchDatabase('lwdash');
  const config = parseLedgerConfig({ url: bench.url, poolSize: 4 });
  const captured: Captured[] = [];
  const db = new Kysely<Record<string, never>>({
    dialect: new MysqlDialect({ pool: createLedgerPool(config) }),
    log: (e) => {
      if (e.level === 'query' && /^\s*SELECT/i.test(e.query.sql))
        captured.push({ sql: e.query.sql, parameters: e.query.parameters });
    },
  });
  const ledger = new Ledger({ url: bench.url }, db);
  try {
    await ledger.migrate();
    const t0 = performance.now();
    await fill(ledger, db);
    progress(`filled ${fmt(ROWS)} rows in ${fmt((performance.now() - t0) / 1000, 1)} s`);
    const some = await ledger.operator.items({ queue: QUEUE, state: 'pending' }, { limit: 1 });
    const results: Measured[] = [];
    results.push(await walk(ledger, db, captured, 'items, newest first', { queue: QUEUE }));
    results.push(await walk(ledger, db, captured, 'items of a type (half)', { queue: QUEUE, type: 'a' }));
    results.push(await walk(ledger, db, captured, 'items, state=dead (1%)', { queue: QUEUE, state: 'dead' }));
    results.push(
      await timed('item by id', db, captured, () => ledger.operator.items({ queue: QUEUE, id: some.items[0]?.id })),
    );
    results.push(await timed('queue views (stats + last hour)', db, captured, () => ledger.operator.queues(QUEUE)));
    results.push(await timed('dead groups', db, captured, () => ledger.operator.deadGroups(QUEUE)));
    results.push(await timed('lanes', db, captured, () => ledger.operator.lanes(QUEUE)));
    return results;
  } finally {
    await ledger.close();
    if (kept) progress(`kept database ${kept}`);
    await bench.drop();
  }
}

export default defineWorkload<'reads', Measured[]>({
  about: "the dashboard's reads and their plans on a ledger of --rows items (Dashboard paging)",
  variants: ['reads'],
  label: () => 'dashboard reads',
  runs: 1,
  measure,
  line: (_, r) => `${r.length} reads`,
  report: (of) =>
    of('reads').flatMap((results) => [
      {
        title: `Dashboard reads on ${fmt(ROWS)} items (MariaDB, ${codeRevision()})`,
        headers: ['read', 'first page ms', 'deep page ms', 'pages walked', 'p50 ms', 'p99 ms', 'items seen'],
        rows: results.map((m) => [
          m.label,
          fmt(m.firstMs, 1),
          Number.isNaN(m.deepMs) ? '-' : fmt(m.deepMs, 1),
          fmt(m.deepPage),
          fmt(m.p50, 1),
          fmt(m.p99, 1),
          fmt(m.found),
        ]),
      },
      {
        title: 'EXPLAIN (table:type/key) of each statement, first page',
        headers: ['read', 'plans'],
        rows: results.map((m) => [m.label, m.plans.join(' ; ')]),
      },
    ]),
});
