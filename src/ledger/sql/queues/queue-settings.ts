import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';

// A queue's settings held by the ledger, one row of lw_queues each (schema 8
// and 9): the limit per concurrency key, fairness, and the paused flag. Set by
// an operator or a consumer at its start, read by every producer's and
// consumer's statements, so they hold fleet-wide and without Redis.

/** The settings a queue's row holds. */
export type QueueSetting = 'key_limit' | 'fair' | 'paused' | 'stale_only';

/** Writes one setting of a queue, making its row if it has none. */
export async function writeQueueSetting(
  exec: Executor,
  t: LedgerTables,
  queue: string,
  setting: QueueSetting,
  value: number | null,
): Promise<void> {
  const column = sql.raw(setting);
  await sql`INSERT INTO ${t.queues} (queue, capped_claims, updated_at, ${column}) VALUES (${queue}, 0, NOW(6), ${value})
    ON DUPLICATE KEY UPDATE ${column} = ${value}, updated_at = NOW(6)`.execute(exec);
}

/** Which of `queues` are paused. */
export async function pausedQueues(exec: Executor, t: LedgerTables, queues: readonly string[]): Promise<Set<string>> {
  if (queues.length === 0) return new Set();
  const r = await sql<{
    queue: string;
  }>`SELECT queue FROM ${t.queues} WHERE queue IN (${sql.join(queues.map((q) => sql`${q}`))}) AND paused = 1`.execute(
    exec,
  );
  return new Set(r.rows.map((x) => x.queue));
}

/** Which of `queues` claim only rescued work (stale-only, schema 14). */
export async function staleOnlyQueues(
  exec: Executor,
  t: LedgerTables,
  queues: readonly string[],
): Promise<Set<string>> {
  if (queues.length === 0) return new Set();
  const r = await sql<{
    queue: string;
  }>`SELECT queue FROM ${t.queues} WHERE queue IN (${sql.join(
    queues.map((q) => sql`${q}`),
  )}) AND stale_only = 1`.execute(exec);
  return new Set(r.rows.map((x) => x.queue));
}

/** Every queue the ledger holds paused, in name order. */
export async function allPausedQueues(exec: Executor, t: LedgerTables): Promise<string[]> {
  const r = await sql<{ queue: string }>`SELECT queue FROM ${t.queues} WHERE paused = 1 ORDER BY queue`.execute(exec);
  return r.rows.map((x) => x.queue);
}
