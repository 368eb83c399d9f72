import { sql, type RawBuilder } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import { retryOnConflict } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import { groupBy } from '../../../group-by.js';
import { inline, list } from '../common/fragments.js';

/**
 * A fair queue's current round: the lowest priority among its pending heads
 * (one index lookup per class, on ix_claim), or, with none pending, the
 * highest among its completed items, or 0.
 */
export function currentRound(t: LedgerTables, queue: string): RawBuilder<unknown> {
  // LEAST and GREATEST are NULL if any argument is: a class without such items stands in as the far end.
  const NONE = 2_147_483_647;
  const edge = (fn: 'MIN' | 'MAX', state: string): RawBuilder<unknown> =>
    sql.join(
      ['interactive', 'default', 'bulk'].map(
        (c) =>
          sql`COALESCE((SELECT ${sql.raw(fn)}(priority) FROM ${t.items} WHERE queue = ${inline(
            queue,
          )} AND queue_class = ${inline(c)} AND state = ${inline(state)} AND is_head = 1), ${inline(
            fn === 'MIN' ? NONE : 0,
          )})`,
      ),
    );
  return sql`COALESCE(NULLIF(LEAST(${edge('MIN', 'pending')}), ${inline(NONE)}), GREATEST(${edge(
    'MAX',
    'completed',
  )}))`;
}

/**
 * Deletes the rows of these keys that hold nothing: no admitted item, no
 * waiting one, and in a fair queue no round dealt past the queue's current
 * one (a new batch would start there anyway). Purge calls it for the keys of
 * the items it deleted, so a tenant key used once does not keep a row for
 * ever. An admission that upserts a key at the same time either finds the
 * row gone and makes it afresh, or has counted an item first, and then the
 * row stays: the DELETE re-reads each row it locks.
 */
export async function deleteIdleKeys(
  db: LedgerDb,
  t: LedgerTables,
  keys: readonly { queue: string; key: string }[],
): Promise<void> {
  for (const [queue, group] of groupBy(keys, (k) => k.queue)) {
    const ckeys = group.map((k) => k.key);
    await retryOnConflict(() =>
      sql`DELETE FROM ${t.keys} WHERE queue = ${inline(queue)} AND ckey IN (${list([
        ...new Set(ckeys),
      ])}) AND admitted = 0
        AND NOT EXISTS (SELECT 1 FROM ${t.keyWaits} w WHERE w.queue = ${t.keys}.queue AND w.ckey = ${t.keys}.ckey)
        AND (fair = 0 OR next_round <= ${currentRound(t, queue)})`.execute(db),
    );
  }
}
