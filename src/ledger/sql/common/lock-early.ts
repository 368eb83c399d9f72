import { sql, type Transaction } from 'kysely';
import type { LedgerDb } from '../../connection.js';

/**
 * Begins a transaction that takes its locks as it goes: on TiDB a
 * pessimistic transaction even in a session in optimistic mode (TiDB's
 * executable comment); MariaDB and MySQL read a plain BEGIN. A conflict's
 * retry begins this way: in optimistic mode a transaction over rows that
 * many others write at once loses at COMMIT to every smaller one that
 * wrote them meanwhile, and one that locks as it goes waits instead.
 *
 * Sent inside a transaction already begun (Kysely's), it ends that one,
 * which must not have run a statement yet, and begins this one.
 */
export const beginLockingEarly = sql`BEGIN /*T! PESSIMISTIC */`;

/** `body` in a Kysely transaction on `db`, begun locking early when `lockEarly`. */
export function transactionOn<T>(
  db: LedgerDb,
  lockEarly: boolean,
  body: (trx: Transaction<Record<string, never>>) => Promise<T>,
): Promise<T> {
  return db.transaction().execute(async (trx) => {
    if (lockEarly) await beginLockingEarly.execute(trx);
    return body(trx);
  });
}
