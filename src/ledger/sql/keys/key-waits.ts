import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { list } from '../common/fragments.js';

/**
 * The wait rows of the new items that were not admitted: after their insert,
 * in its transaction. Items due at one instant are one batch's: `seq`, the
 * place in the batch, keeps them in the order they were enqueued.
 */
export function waitRowsFor(t: LedgerTables, ids: readonly string[]): RawBuilder<unknown> {
  return sql`INSERT INTO ${t.keyWaits} (queue, ckey, run_after, seq, id)
    SELECT queue, concurrency_key, run_after, FIELD(id, ${list(ids)}), id FROM ${t.items}
    WHERE id IN (${list(ids)}) AND concurrency_key IS NOT NULL AND lane IS NULL AND is_head = 0`;
}

/** A waiting item that ended (cancelled) gives up its place in its key's line. */
export async function leaveKeyWait(exec: Executor, t: LedgerTables, id: string): Promise<void> {
  await sql`DELETE w FROM ${t.keyWaits} w JOIN ${t.items} i ON i.id = ${id}
    AND w.queue = i.queue AND w.ckey = i.concurrency_key AND w.run_after = i.run_after AND w.id = i.id`.execute(exec);
}
