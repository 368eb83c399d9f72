import { sql } from 'kysely';
import type { IdOrder } from '../../ids.js';
import type { LedgerDb } from '../../connection.js';
import { ER_DUP_ENTRY, errno, retryTransaction } from '../../retry.js';
import type { ItemRow } from '../../rows.js';
import type { LedgerTables } from '../../tables.js';
import { ReplayRejectedError, type ReplayRejection } from '../../../errors.js';
import type { QueueClass } from '../../types.js';
import { affected, ITEM_COLUMNS } from '../common/fragments.js';
import { insertItems } from '../enqueue/insert.js';
import type { NewItem } from '../enqueue/new-item.js';
import { givenKey, readKeyRules, scopeKeys } from '../keys/scope.js';

/**
 * Operator re-drive of a dead or cancelled item. Guarded by what the operator
 * saw (its attempt count and the digest of its last error) so two operators,
 * or one acting on a stale view, cannot replay twice. The replay is a new
 * item at the tail of the same lane (`replayOf` → the original, which gets
 * `replayedAt`), with a fresh attempt budget; the original's history stays.
 */
export async function replayItem(
  db: LedgerDb,
  t: LedgerTables,
  opts: { id: string; expectAttempt: number; expectErrorDigest: string },
  idOrder: IdOrder,
): Promise<{ id: string }> {
  return retryTransaction(
    db,
    async (trx) => {
      const u = await sql`UPDATE ${t.items} SET replayed_at = NOW(6), updated_at = NOW(6)
        WHERE id = ${opts.id} AND state IN ('dead', 'cancelled') AND replayed_at IS NULL
          AND attempt = ${opts.expectAttempt} AND SHA2(COALESCE(last_error, ''), 256) = ${
            opts.expectErrorDigest
          }`.execute(trx);
      const rows = await sql<ItemRow>`SELECT ${ITEM_COLUMNS} FROM ${t.items} WHERE id = ${opts.id}`.execute(trx);
      const row = rows.rows[0];
      if (affected(u) !== 1 || !row) throw new ReplayRejectedError(opts.id, whyRejected(row, opts));
      const replay: NewItem = {
        queue: row.queue,
        type: row.type,
        payloadJson: row.payload,
        lane: row.lane,
        concurrencyKey: givenKey(row.concurrency_key ?? null),
        priority: row.priority,
        queueClass: row.queue_class as QueueClass,
        maxAttempts: row.max_attempts,
        runAt: null,
        delayMs: 0,
        idempotencyKey: null,
        replayOf: row.id,
        // The replay is linked to the enqueue that made the original, as the original was.
        traceparent: row.traceparent ?? null,
      };
      // A new item: the limits of now say whose admits it, as at an enqueue.
      if (replay.concurrencyKey !== null) scopeKeys([replay], await readKeyRules(trx, t, [replay.queue]), 'replay');
      const [created] = await insertItems(trx, t, [replay], false, idOrder);
      if (!created) throw new Error('replay: insert returned nothing');
      return { id: created.id };
    },
    (e) => errno(e) === ER_DUP_ENTRY,
  );
}

function whyRejected(
  row: ItemRow | undefined,
  opts: { expectAttempt: number; expectErrorDigest: string },
): ReplayRejection {
  if (!row) return 'not_found';
  if (row.state !== 'dead' && row.state !== 'cancelled') return 'not_replayable_state';
  if (row.replayed_at !== null) return 'already_replayed';
  if (row.attempt !== opts.expectAttempt) return 'attempt_mismatch';
  return 'error_mismatch';
}
