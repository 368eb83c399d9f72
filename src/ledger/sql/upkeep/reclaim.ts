import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { LedgerDb } from '../../connection.js';
import { newId, newLeaseToken } from '../../ids.js';
import { CONNECTION_RETRY, isConnectionError, readAfterLostConnection, retryDelay } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import { QUEUE_CLASSES } from '../../types.js';
import type { ReclaimOutcome } from '../../upkeep-types.js';
import { inline, list, literal, NO_TIME, NO_TIME_TEXT } from '../common/fragments.js';
import { noneAsNull, noTimeAsNull } from '../../rows.js';
import { retryPipelined } from '../common/pipeline.js';
import { settleDependents } from '../workflows/settle.js';
import { applyTransition } from '../common/transition.js';

/**
 * Items whose lease ran out without a finish (the holder crashed or hung).
 * The expired attempt counts against the budget; a reclaimed item keeps its
 * due time, so claims (earliest due first) take it before work due after it. Each change is a CAS on the
 * token that was read and on the lease still being expired, so a holder that
 * renews at the last moment keeps its item.
 *
 * The items that go back to pending (the common case: a dead holder's
 * whole share) change in one transaction of one round trip, so a holder
 * that died with hundreds of items has them all claimable at once; those
 * whose attempt budget is spent or whose cancel was requested end one by
 * one, each with its lane (they are terminal).
 */
export async function reclaimExpired(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  opts: { queue?: string | undefined; limit: number },
): Promise<ReclaimOutcome> {
  const queues = opts.queue !== undefined ? [opts.queue] : await queuesWithItems(db, t);
  const rows: ExpiredRow[] = [];
  for (const queue of queues) {
    if (rows.length >= opts.limit) break;
    rows.push(...(await expiredLeases(db, t, queue, opts.limit - rows.length)));
  }
  const out: ReclaimOutcome = { reclaimed: [], dead: [], cancelled: [] };
  const back = rows.filter((r) => r.cancel_requested !== 1 && r.attempt < r.max_attempts);
  out.reclaimed.push(...(await backToPending(db, caps, t, back)));
  for (const r of rows) {
    const cancel = r.cancel_requested === 1;
    const spent = r.attempt >= r.max_attempts;
    if (!cancel && !spent) continue;
    const owner = noneAsNull(r.lease_owner);
    const history = {
      attempt: r.attempt,
      outcome: 'lease_expired' as const,
      failureClass: 'lease_expired',
      error: `lease held by ${owner ?? '?'} expired`,
      worker: owner,
      startedAt: noTimeAsNull(r.started_at),
    };
    const won = await applyTransition(db, t, {
      place: {
        id: r.id,
        queue: r.queue,
        lane: r.lane,
        laneSeq: r.lane_seq === null ? null : Number(r.lane_seq),
        storedKey: r.concurrency_key,
      },
      guard: sql`lease_token = ${r.lease_token} AND state = 'processing' AND lease_until < NOW(6)`,
      set: cancel
        ? // The cancel request recorded its reason as the last error: it stays (the history says the lease expired).
          sql`state = 'cancelled', failure_class = 'cancelled', lease_until = ${NO_TIME}, terminal_at = NOW(6)`
        : sql`state = 'dead', failure_class = 'lease_expired', last_error = ${history.error}, lease_until = ${NO_TIME},
            terminal_at = NOW(6)`,
      terminal: true,
      wasHead: true,
      history,
      // A workflow's job settles its dependents as after a failure (sql/workflows/settle.ts).
      alsoWrite:
        r.workflow_id === null
          ? undefined
          : (trx) => settleDependents(trx, t, [{ id: r.id, end: 'failed' }]).then(() => undefined),
    });
    if (won) (cancel ? out.cancelled : out.dead).push(r.id);
  }
  return out;
}

/**
 * Expired leases back to pending, in one transaction: the CAS of each (its
 * token, still processing, still expired) marks the rows it won with a token
 * of this reclaim's, their history rows are written from the rows so marked,
 * the winners read back, and each gets its own token back. run_after stays:
 * the item keeps its place among the due heads (it was due when it was
 * claimed), so it is in the next claim, not behind younger work. No lane
 * changes: a reclaimed head stays its lane's head. Returns the ids reclaimed.
 */
async function backToPending(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  rows: readonly ExpiredRow[],
): Promise<string[]> {
  if (rows.length === 0) return [];
  const ids = list(rows.map((r) => r.id));
  const tokenOf = caseOfId(rows.map((r) => [r.id, r.lease_token]));
  for (let attempt = 1; ; attempt++) {
    // Made once per run: the history rows tell whether a run whose answer was lost committed.
    const historyIds = rows.map(() => newId());
    const mark = inline(newLeaseToken());
    const historyId = caseOfId(rows.map((r, k) => [r.id, historyIds[k]!]));
    try {
      return await retryPipelined(db, caps, async (send) => {
        const [, , won] = await send(
          [
            sql`UPDATE ${t.items} FORCE INDEX (PRIMARY) SET state = 'pending', failure_class = 'lease_expired',
              last_error = CONCAT('lease held by ', IF(lease_owner = '', '?', lease_owner), ' expired'),
              lease_until = ${NO_TIME}, lease_token = ${mark}, updated_at = NOW(6)
              WHERE id IN (${ids}) AND lease_token = ${tokenOf} AND state = 'processing' AND lease_until < NOW(6)`,
            sql`INSERT INTO ${
              t.attempts
            } (id, item_id, attempt, outcome, failure_class, error, worker, started_at, ended_at)
              SELECT ${historyId}, id, attempt, 'lease_expired', 'lease_expired', last_error, NULLIF(lease_owner, ''),
                NULLIF(started_at, ${sql.raw(NO_TIME_TEXT)}), NOW(6)
              FROM ${t.items} WHERE id IN (${ids}) AND lease_token = ${mark}`,
            sql`SELECT id FROM ${t.items} WHERE id IN (${ids}) AND lease_token = ${mark}`,
            sql`UPDATE ${t.items} FORCE INDEX (PRIMARY) SET lease_token = ${tokenOf} WHERE id IN (${
              ids
            }) AND lease_token = ${mark}`,
          ],
          { commit: true },
        );
        return (won?.rows ?? []).map((r) => String(r.id));
      });
    } catch (error) {
      if (!isConnectionError(error) || attempt >= CONNECTION_RETRY.maxAttempts) throw error;
      // It may have committed with its answer lost: its history rows say which items it reclaimed.
      const won = await readAfterLostConnection(() => reclaimedBy(db, t, rows, historyIds), error);
      if (won.length > 0) return won;
      await retryDelay(CONNECTION_RETRY, attempt);
    }
  }
}

/** `CASE id WHEN … THEN … END`: a value per row, by id. */
function caseOfId(pairs: readonly (readonly [string, string])[]): RawBuilder<unknown> {
  return sql.raw(`CASE id ${pairs.map(([id, value]) => `WHEN ${literal(id)} THEN ${literal(value)}`).join(' ')} END`);
}

/**
 * The items a reclaim run wrote these history rows for; the locking read waits for a lost session's transaction to end.
 */
async function reclaimedBy(
  db: LedgerDb,
  t: LedgerTables,
  rows: readonly ExpiredRow[],
  historyIds: readonly string[],
): Promise<string[]> {
  await sql`SELECT id FROM ${t.items} WHERE id IN (${list(rows.map((r) => r.id))}) FOR UPDATE`.execute(db);
  const r = await sql<{ item_id: string }>`SELECT item_id FROM ${t.attempts} WHERE id IN (${list(historyIds)})`.execute(
    db,
  );
  return r.rows.map((row) => row.item_id);
}

interface ExpiredRow {
  id: string;
  queue: string;
  lane: string | null;
  lane_seq: number | null;
  concurrency_key: string | null;
  lease_token: string;
  lease_owner: string | null;
  attempt: number;
  max_attempts: number;
  started_at: Date | null;
  cancel_requested: number;
  workflow_id: string | null;
}

/**
 * There is deliberately no index on lease_until: it would change on every
 * claim, renewal and finish. Items in flight are few, so the claim index's
 * (queue, class, 'processing') ranges find them, and the expiry is a filter.
 */
async function expiredLeases(db: LedgerDb, t: LedgerTables, queue: string, limit: number): Promise<ExpiredRow[]> {
  const r = await sql<ExpiredRow>`SELECT id, queue, lane, lane_seq, concurrency_key, lease_token, lease_owner, attempt,
      max_attempts, started_at,
      cancel_requested, workflow_id
    FROM ${t.items} FORCE INDEX (ix_claim)
    WHERE queue = ${queue} AND queue_class IN (${list(QUEUE_CLASSES)}) AND state = 'processing' AND lease_until < NOW(6)
    ORDER BY lease_until LIMIT ${limit}`.execute(db);
  return r.rows;
}

/** Distinct queues, read as a loose scan of the claim index's first column. */
async function queuesWithItems(db: LedgerDb, t: LedgerTables): Promise<string[]> {
  const r = await sql<{ queue: string }>`SELECT DISTINCT queue FROM ${t.items} FORCE INDEX (ix_claim)`.execute(db);
  return r.rows.map((row) => row.queue);
}
