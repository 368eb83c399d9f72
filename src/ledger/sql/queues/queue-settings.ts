import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';

// A queue's settings held by the ledger, one row of lw_queues each (schema 8,
// 9 and 18): the limit per concurrency key, fairness, the paused flag, slots and the fleet cap. Set by
// an operator or a consumer at its start, read by every producer's and
// consumer's statements, so they hold fleet-wide and without Redis.

/** The settings a queue's row holds. */
export type QueueSetting = 'key_limit' | 'fair' | 'paused' | 'stale_only' | 'slots' | 'max_processing';

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

/** Writes several settings of a queue in one statement, making its row if it has none. */
export async function writeQueueSettings(
  exec: Executor,
  t: LedgerTables,
  queue: string,
  values: Partial<Record<QueueSetting, number | null>>,
): Promise<void> {
  const set = Object.entries(values).filter(([, v]) => v !== undefined);
  if (set.length === 0) return;
  const columns = set.map(([c]) => sql.raw(c));
  const updates = set.map(([c, v]) => sql`${sql.raw(c)} = ${v}`);
  await sql`INSERT INTO ${t.queues} (queue, capped_claims, updated_at, ${sql.join(columns)})
    VALUES (${queue}, 0, NOW(6), ${sql.join(set.map(([, v]) => sql`${v}`))})
    ON DUPLICATE KEY UPDATE ${sql.join(updates)}, updated_at = NOW(6)`.execute(exec);
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
