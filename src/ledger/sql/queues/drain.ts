import { sql } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import { ER_NO_SUCH_TABLE, errno, retryOnConflict } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import { list } from '../common/fragments.js';

// Drain-only queues and their delete (schema 16): a drain-only queue refuses
// enqueues while its consumers finish what it holds; an empty one can be
// deleted with every row the ledger keeps of it. The ledger's queues are its
// lw_queues rows: an enqueue writes its queue's row the first time a process
// sees that queue (QueueGate), and schema 16 wrote one for every queue with items.

/** Unknown column: a ledger below schema 16. */
const ER_BAD_FIELD_ERROR = 1054;
/** How many items a delete removes per statement. */
const DELETE_BATCH = 500;
/** How many unfinished items a refused delete counts, at most. */
const UNFINISHED_CAP = 10_000;

/** A queue the ledger holds: its flags, its settings (schema 18) and its incarnation. */
export interface QueueRow {
  queue: string;
  paused: boolean;
  staleOnly: boolean;
  drainOnly: boolean;
  /** Executor slots per worker; null: each worker's own (its config, else the default). */
  slots: number | null;
  /** The fleet cap on its processing items; null: none, unless a worker's config sets one. */
  maxProcessing: number | null;
  /** Items of one concurrency key admitted at once; null: no limit. */
  concurrencyLimit: number | null;
  /**
   * When its row was made, in µs since 2000-01-01 by the database's clock: a queue deleted and made again
   * under its name has a greater one.
   */
  incarnation: number;
}

/** Sets or clears a queue's drain-only flag (making its row if it has none); `drain_since` keeps the first setting. */
export async function writeDrainOnly(exec: Executor, t: LedgerTables, queue: string, on: boolean): Promise<void> {
  const v = on ? 1 : 0;
  const since = on ? sql`COALESCE(drain_since, NOW(6))` : sql`NULL`;
  await sql`INSERT INTO ${t.queues} (queue, capped_claims, updated_at, drain_only, drain_since)
    VALUES (${queue}, 0, NOW(6), ${v}, ${on ? sql`NOW(6)` : null})
    ON DUPLICATE KEY UPDATE drain_only = ${v}, drain_since = ${since}, updated_at = NOW(6)`.execute(exec);
}

/** Per queue of `queues` that has a row: whether it is drain-only. Undefined on a ledger below schema 16. */
export async function drainFlags(
  exec: Executor,
  t: LedgerTables,
  queues: readonly string[],
): Promise<Map<string, boolean> | undefined> {
  if (queues.length === 0) return new Map();
  try {
    const r = await sql<{ queue: string; drain_only: number | string }>`SELECT queue, drain_only FROM ${t.queues}
      WHERE queue IN (${list(queues)})`.execute(exec);
    return new Map(r.rows.map((x) => [String(x.queue), Number(x.drain_only) === 1]));
  } catch (error) {
    if (errno(error) === ER_BAD_FIELD_ERROR || errno(error) === ER_NO_SUCH_TABLE) return undefined;
    throw error;
  }
}

/** Writes a row for each of `queues` that has none, so the supervisor's reconcile finds it. */
export async function registerQueues(exec: Executor, t: LedgerTables, queues: readonly string[]): Promise<void> {
  if (queues.length === 0) return;
  const rows = queues.map((q) => sql`(${q}, 0, NOW(6))`);
  // Producers meeting a new queue at once write the same row: a conflict (TiDB's) is tried again. Below schema 8
  // there is no table to write (nor a worker of this build to read it).
  await retryOnConflict(() =>
    sql`INSERT INTO ${t.queues} (queue, capped_claims, updated_at) VALUES ${sql.join(rows)}
      ON DUPLICATE KEY UPDATE queue = queue`.execute(exec),
  ).catch((error: unknown) => {
    if (errno(error) !== ER_NO_SUCH_TABLE) throw error;
  });
}

/** Every queue the ledger holds (or those of `queues` it holds), in name order, with its flags and settings. */
export async function queueRows(exec: Executor, t: LedgerTables, queues?: readonly string[]): Promise<QueueRow[]> {
  if (queues?.length === 0) return [];
  const only = queues === undefined ? sql`` : sql`WHERE queue IN (${list(queues)})`;
  const r = await sql<{
    queue: string;
    paused: number | string;
    stale_only: number | string;
    drain_only: number | string;
    slots: number | string | null;
    max_processing: number | string | null;
    key_limit: number | string | null;
    incarnation: number | string;
  }>`SELECT queue, paused, stale_only, drain_only, slots, max_processing, key_limit,
      TIMESTAMPDIFF(MICROSECOND, '2000-01-01', created_at) AS incarnation
    FROM ${t.queues} ${only} ORDER BY queue`.execute(exec);
  const orNull = (v: number | string | null): number | null => (v === null ? null : Number(v));
  return r.rows.map((x) => ({
    queue: String(x.queue),
    paused: Number(x.paused) === 1,
    staleOnly: Number(x.stale_only) === 1,
    drainOnly: Number(x.drain_only) === 1,
    slots: orNull(x.slots),
    maxProcessing: orNull(x.max_processing),
    concurrencyLimit: orNull(x.key_limit),
    incarnation: Number(x.incarnation),
  }));
}

/** Why a queue cannot be deleted now, or undefined: it may be. */
export type DeleteCheck =
  | { refused: 'not_drain_only' }
  | { refused: 'settling'; retryInMs: number }
  | { refused: 'not_empty'; unfinished: number };

/**
 * Whether `queue` may be deleted: it is drain-only, has been for `settleMs`
 * (by the database's clock, so every producer has learnt it), and holds no
 * pending, running or blocked item.
 */
export async function checkDeletable(
  exec: Executor,
  t: LedgerTables,
  queue: string,
  settleMs: number,
): Promise<DeleteCheck | undefined> {
  const r = await sql<{ drain_only: number | string; ms: number | string | null }>`SELECT drain_only,
      TIMESTAMPDIFF(MICROSECOND, drain_since, NOW(6)) DIV 1000 AS ms FROM ${t.queues} WHERE queue = ${queue}`.execute(
    exec,
  );
  const row = r.rows[0];
  if (!row || Number(row.drain_only) !== 1) return { refused: 'not_drain_only' };
  const ms = Number(row.ms ?? 0);
  if (ms < settleMs) return { refused: 'settling', retryInMs: settleMs - ms };
  const u = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM (SELECT 1 AS one FROM ${t.items}
    WHERE queue = ${queue} AND state IN ('pending', 'processing', 'blocked') LIMIT ${UNFINISHED_CAP}) AS u`.execute(
    exec,
  );
  const unfinished = Number(u.rows[0]?.n ?? 0);
  return unfinished > 0 ? { refused: 'not_empty', unfinished } : undefined;
}

/**
 * Deletes every row the ledger keeps of `queue`: its items with their
 * attempts, steps and waits (in batches), its lanes, concurrency keys, type
 * limits, rate rows, ownership, consumer registrations, and last its own row.
 * Returns how many items went. The caller checked it is deletable.
 */
export async function deleteQueueRows(db: LedgerDb, t: LedgerTables, queue: string): Promise<number> {
  let items = 0;
  for (;;) {
    const r = await sql<{ id: string }>`SELECT id FROM ${t.items} WHERE queue = ${queue} LIMIT ${DELETE_BATCH}`.execute(
      db,
    );
    const ids = r.rows.map((x) => String(x.id));
    if (ids.length === 0) break;
    await db.transaction().execute(async (trx) => {
      await sql`DELETE FROM ${t.attempts} WHERE item_id IN (${list(ids)})`.execute(trx);
      await sql`DELETE FROM ${t.steps} WHERE item_id IN (${list(ids)})`.execute(trx);
      await sql`DELETE FROM ${t.waits} WHERE item_id IN (${list(ids)})`.execute(trx);
      await sql`DELETE FROM ${t.items} WHERE id IN (${list(ids)})`.execute(trx);
    });
    items += ids.length;
  }
  for (const table of [t.lanes, t.keys, t.keyWaits, t.typeLimits, t.rateLimits, t.ownership, t.consumers, t.queues])
    await sql`DELETE FROM ${table} WHERE queue = ${queue}`.execute(db);
  return items;
}
