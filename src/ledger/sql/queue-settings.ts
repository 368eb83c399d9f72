import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import { inline } from './common.js';

// A queue's settings held by the ledger, one row of lw_queues each (schema 8
// and 9): the limit per concurrency key, fairness, and the paused flag. Set by
// an operator or a consumer at its start, read by every producer's and
// consumer's statements, so they hold fleet-wide and without Redis.

/** The settings a queue's row holds. */
export type QueueSetting = 'key_limit' | 'fair' | 'paused';

/** Writes one setting of a queue, making its row if it has none. */
export async function writeQueueSetting(exec: Executor, t: LedgerTables, queue: string, setting: QueueSetting, value: number | null): Promise<void> {
  const column = sql.raw(setting);
  await sql`INSERT INTO ${t.queues} (queue, capped_claims, updated_at, ${column}) VALUES (${queue}, 0, NOW(6), ${value})
    ON DUPLICATE KEY UPDATE ${column} = ${value}, updated_at = NOW(6)`.execute(exec);
}

/**
 * True of a claim's statement only while `queue` is not paused: a guard in
 * every claim (a round's candidate read and CAS, a claim by ids, a lane
 * successor claimed with a completion). One primary-key read of a small table.
 */
export function notPaused(t: LedgerTables, queue: string): RawBuilder<unknown> {
  return sql`NOT EXISTS (SELECT 1 FROM ${t.queues} pq WHERE pq.queue = ${inline(queue)} AND pq.paused = 1)`;
}

/** The same guard for a statement over items of any queue: true of an item whose queue is not paused. */
export function itemQueueNotPaused(t: LedgerTables): RawBuilder<unknown> {
  return sql`NOT EXISTS (SELECT 1 FROM ${t.queues} pq WHERE pq.queue = ${t.items}.queue AND pq.paused = 1)`;
}

/** Which of `queues` are paused. */
export async function pausedQueues(exec: Executor, t: LedgerTables, queues: readonly string[]): Promise<Set<string>> {
  if (queues.length === 0) return new Set();
  const r = await sql<{ queue: string }>`SELECT queue FROM ${t.queues} WHERE queue IN (${sql.join(queues.map((q) => sql`${q}`))}) AND paused = 1`.execute(exec);
  return new Set(r.rows.map((x) => x.queue));
}
