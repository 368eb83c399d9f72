import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { QUEUE_CLASSES } from '../../types.js';
import { affected, list } from '../common/fragments.js';

/**
 * The waits table (schema 3) finds blocked items by dependency key and by
 * probe time, so the items table needs no index for either. A row exists
 * while its item is blocked: the transaction that blocks an item calls
 * `enterWait`, and every transaction that moves it out of `blocked` calls
 * `leaveWaits`, after the item's own CAS (items row, then waits row: one
 * lock order everywhere). Every lookup still checks the item's state, so a
 * row left behind (by code older than schema 3) is harmless.
 */

/** Records the wait of an item just blocked, copied from its row in the same transaction. */
export async function enterWait(exec: Executor, t: LedgerTables, itemId: string): Promise<void> {
  await sql`INSERT INTO ${t.waits} (item_id, queue, dependency_key, probe_after)
    SELECT * FROM (SELECT id, queue, dependency_key, probe_after FROM ${t.items} WHERE id = ${
      itemId
    } AND state = 'blocked') AS src
    ON DUPLICATE KEY UPDATE dependency_key = src.dependency_key, probe_after = src.probe_after`.execute(exec);
}

/** Forgets the waits of items this transaction moved out of `blocked`. */
export async function leaveWaits(exec: Executor, t: LedgerTables, itemIds: readonly string[]): Promise<void> {
  if (itemIds.length === 0) return;
  await sql`DELETE FROM ${t.waits} WHERE item_id IN (${list(itemIds)})`.execute(exec);
}

/**
 * Records the waits of blocked items that have none: items blocked by a
 * process running code from before schema 3, which wrote no waits row, during
 * a rolling upgrade. Reads the queue's blocked range of the claim index.
 * Returns how many it recorded.
 */
export async function repairWaits(exec: Executor, t: LedgerTables, queue: string): Promise<number> {
  const r = await sql`INSERT IGNORE INTO ${t.waits} (item_id, queue, dependency_key, probe_after)
    SELECT id, queue, dependency_key, probe_after FROM ${t.items}
    WHERE queue = ${queue} AND queue_class IN (${list(QUEUE_CLASSES)}) AND state = 'blocked'
      AND dependency_key IS NOT NULL AND probe_after IS NOT NULL`.execute(exec);
  return affected(r);
}

/** Items waiting on `key` (in `queue` when given). */
export async function waitersOf(
  exec: Executor,
  t: LedgerTables,
  key: string,
  queue: string | undefined,
): Promise<string[]> {
  const queueFilter = queue === undefined ? sql`` : sql`AND queue = ${queue}`;
  const r = await sql<{
    item_id: string;
  }>`SELECT item_id FROM ${t.waits} WHERE dependency_key = ${key} ${queueFilter}`.execute(exec);
  return r.rows.map((x) => x.item_id);
}

export interface DueWait {
  id: string;
  queue: string;
  lane: string | null;
  lane_seq: number | null;
  dependency_key: string;
  /** 1 when the wait has passed its maxWait. */
  expired: number;
}

/** Blocked items whose probe time has come, earliest first. */
export async function dueWaits(
  exec: Executor,
  t: LedgerTables,
  queue: string | undefined,
  limit: number,
): Promise<DueWait[]> {
  const queueFilter = queue === undefined ? sql`` : sql`AND w.queue = ${queue}`;
  const r = await sql<DueWait>`SELECT i.id, i.queue, i.lane, i.lane_seq, i.dependency_key,
      (i.block_expires_at <= NOW(6)) AS expired
    FROM ${t.waits} w JOIN ${t.items} i ON i.id = w.item_id
    WHERE w.probe_after <= NOW(6) AND i.state = 'blocked' ${queueFilter}
    ORDER BY w.probe_after LIMIT ${limit}`.execute(exec);
  return r.rows;
}
