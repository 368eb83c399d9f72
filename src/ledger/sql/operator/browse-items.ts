import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../../connection.js';
import type { SummaryRow } from '../../rows.js';
import type { LedgerTables } from '../../tables.js';
import type { ItemFilter } from '../../operator-types.js';
import { SUMMARY_COLUMNS } from '../common/fragments.js';
import { TYPE_KEY_SEPARATOR } from '../keys/scope.js';

/**
 * Where a page of a queue's items left off: newest first by creation (the
 * index ix_created is (queue, created_at) and ends in the id), or, for one
 * lane, by its sequence downwards (ix_lane).
 */
export type ItemPosition = { by: 'created'; key: string; id: string } | { by: 'lane'; seq: number };

/**
 * How many index entries one page reads at most when a filter the index
 * does not hold (state, type, key) is given. A page then holds the matches
 * among them, possibly fewer than asked, and its cursor goes on from the
 * last entry read: every page costs a bounded index range, whatever the
 * table holds and however rare the matches are.
 */
export const BROWSE_WINDOW = 2_000;

/**
 * One page of a queue's items (see ItemPosition for the order), `limit` at most, and where the next begins (null: no
 * more).
 */
export async function browseItems(
  exec: Executor,
  t: LedgerTables,
  f: ItemFilter,
  after: ItemPosition | undefined,
  limit: number,
): Promise<{ rows: SummaryRow[]; next: ItemPosition | null }> {
  const residual = residualFilter(f);
  if (f.id !== undefined || f.idempotencyKey !== undefined) {
    // A primary key or unique key lookup: one row at most, one page.
    if (after !== undefined) return { rows: [], next: null };
    const exact = f.id !== undefined ? sql`i.id = ${f.id}` : sql`i.idempotency_key = ${f.idempotencyKey ?? ''}`;
    const r = await sql<SummaryRow>`SELECT ${SUMMARY_COLUMNS} FROM ${t.items} i
      WHERE i.queue = ${f.queue} AND ${exact}${f.lane === undefined ? sql`` : sql` AND i.lane = ${f.lane}`}${
        residual
      }`.execute(exec);
    return { rows: r.rows, next: null };
  }
  const walk = f.lane !== undefined ? laneWalk(f.queue, f.lane, after) : createdWalk(f.queue, after);
  // The index range is read alone first (index only: a statement that also wanted the row's other
  // columns was planned by MariaDB as a `ref` from the queue's newest entry, looking each row up,
  // so a deep page cost its depth), then its rows are read by primary key.
  const size = residual === EMPTY ? limit + 1 : BROWSE_WINDOW;
  const window = sql`SELECT i.id, ${walk.keyColumns} FROM ${t.items} i WHERE ${walk.scope} ORDER BY ${
    walk.desc
  } LIMIT ${size}`;
  const r = await sql<SummaryRow>`SELECT ${SUMMARY_COLUMNS} FROM (${window}) w JOIN ${t.items} i ON i.id = w.id
    WHERE 1 = 1${residual} ORDER BY ${walk.desc} LIMIT ${limit + 1}`.execute(exec);
  if (r.rows.length > limit || residual === EMPTY) return pageOf(r.rows, limit, walk);
  // Fewer matches than asked: the page ends where the window ended, unless the window reached the end.
  const last = await sql<WindowEnd>`SELECT e.id, e.created_key, e.lane_seq, c.n FROM
    (SELECT w.* FROM (${window}) w ORDER BY ${walk.ascInWindow} LIMIT 1) e, (SELECT COUNT(*) AS n FROM (${
      window
    }) w) c`.execute(exec);
  const end = last.rows[0];
  return { rows: r.rows, next: end !== undefined && Number(end.n) >= BROWSE_WINDOW ? walk.position(end) : null };
}

interface WindowEnd {
  id: string;
  created_key: string;
  lane_seq: number | string | null;
  n: number | string;
}

interface Walk {
  /** The index range, from the position on. */
  scope: RawBuilder<unknown>;
  /** Its order, on alias i. */
  desc: RawBuilder<unknown>;
  /** What the window keeps of each entry (index columns only), and its reverse order there. */
  keyColumns: RawBuilder<unknown>;
  ascInWindow: RawBuilder<unknown>;
  position(row: { id: string; created_key: string; lane_seq: number | string | null }): ItemPosition;
}

const EMPTY = sql``;

/** State, type and key: filters the index does not hold, checked on each row read. */
function residualFilter(f: ItemFilter): RawBuilder<unknown> {
  const parts: RawBuilder<unknown>[] = [];
  if (f.state !== undefined) parts.push(sql` AND i.state = ${f.state}`);
  if (f.type !== undefined) parts.push(sql` AND i.type = ${f.type}`);
  if (f.key !== undefined)
    parts.push(sql` AND i.concurrency_key IN (${f.key}, CONCAT(i.type, ${TYPE_KEY_SEPARATOR}, ${f.key}))`);
  return parts.length === 0 ? EMPTY : sql.join(parts, sql``);
}

function createdWalk(queue: string, after: ItemPosition | undefined): Walk {
  const from =
    after?.by === 'created'
      ? // The range is created_at <= key; the entries of that very microsecond are cut by id.
        sql` AND i.created_at <= ${after.key} AND (i.created_at < ${after.key} OR i.id < ${after.id})`
      : sql``;
  return {
    scope: sql`i.queue = ${queue}${from}`,
    desc: sql`i.created_at DESC, i.id DESC`,
    keyColumns: sql`i.created_at, DATE_FORMAT(i.created_at, '%Y-%m-%d %H:%i:%s.%f') AS created_key, NULL AS lane_seq`,
    ascInWindow: sql`w.created_at, w.id`,
    position: (row) => ({ by: 'created', key: row.created_key, id: row.id }),
  };
}

function laneWalk(queue: string, lane: string, after: ItemPosition | undefined): Walk {
  const from = after?.by === 'lane' ? sql` AND i.lane_seq < ${after.seq}` : sql``;
  return {
    scope: sql`i.queue = ${queue} AND i.lane = ${lane}${from}`,
    desc: sql`i.lane_seq DESC`,
    keyColumns: sql`i.lane_seq, '' AS created_key`,
    ascInWindow: sql`w.lane_seq`,
    position: (row) => ({ by: 'lane', seq: Number(row.lane_seq) }),
  };
}

function pageOf(rows: SummaryRow[], limit: number, walk: Walk): { rows: SummaryRow[]; next: ItemPosition | null } {
  if (rows.length <= limit) return { rows, next: null };
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return { rows: page, next: last ? walk.position(last) : null };
}
