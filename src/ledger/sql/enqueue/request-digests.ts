import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';

/** How long a ledger that found no digest column waits before it asks again (a migration may add it meanwhile). */
const ASK_AGAIN_MS = 60_000;

/**
 * Whether the items table has request digests (schema 13), asked on first
 * need: a producer of this build on an older schema still enqueues with
 * idempotency keys, as before, without them (its keys then behave as keys
 * stored before the upgrade do: a repeat is a duplicate). Once found, the
 * column is taken to stay.
 */
export function requestDigestsOnce(db: LedgerDb, t: LedgerTables): () => Promise<boolean> {
  let found = false;
  let asking: Promise<boolean> | undefined;
  let askedAt = 0;
  return async () => {
    if (found) return true;
    if (asking === undefined || Date.now() - askedAt > ASK_AGAIN_MS) {
      askedAt = Date.now();
      asking = hasRequestDigests(db, t);
      // A failed ask is not kept: the next enqueue asks again.
      asking.catch(() => (asking = undefined));
    }
    if (await asking) found = true;
    return found;
  };
}

async function hasRequestDigests(db: LedgerDb, t: LedgerTables): Promise<boolean> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = ${`${t.prefix}items`} AND column_name = 'request_digest'`.execute(
    db,
  );
  return Number(r.rows[0]?.n ?? 0) > 0;
}
