import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../../connection.js';
import { PartialBatch } from '../../../errors.js';
import type { LedgerTables } from '../../tables.js';
import type { ClaimedRow } from '../../rows.js';
import type { ClaimedItem, QueueClass, SuccessorClaim } from '../../types.js';
import {
  CLAIMED_COLUMNS,
  claimedItems,
  grantLease,
  leaseAssignments,
  readBackClaimed,
  successorFilter,
  type Lease,
} from '../claim/claimed.js';
import { inline, laneIn, list, queueScoped } from '../common/fragments.js';
import { completionStatement, type CompletionEntry } from './cas.js';
import { refuseUnless } from '../common/guard.js';
import type { Send } from '../common/pipeline.js';
import { advanceLocked, headSuccessors, idleLanes, successorPlaces, type EndedHead } from '../lanes/advance.js';

export interface BatchDone {
  /** Per entry: whether its CAS won. */
  won: boolean[];
  /**
   * Lanes (queue-scoped) whose new head was left pending for a claim; in a keyed batch, keys (queue-scoped stored keys)
   * whose admitted items were.
   */
  advanced: Set<string>;
  /** Successors claimed under the SuccessorClaim's lease. */
  claimed: ClaimedItem[];
}

/** The laned entries' heads, one per lane (the batch holds each lane once). */
function endedHeads(entries: readonly CompletionEntry[]): EndedHead[] {
  return entries.flatMap((e) =>
    e.handle.lane === null ? [] : [{ queue: e.handle.queue, lane: e.handle.lane, laneSeq: e.handle.laneSeq ?? 0 }],
  );
}

/**
 * A laned batch in a transaction of one round trip, for the common case:
 * every CAS wins, and every lane either has its successor pending at
 * `lane_seq + 1` (sequences are gap free) or ended with this item, so it
 * goes idle. Guards (sql/common/guard.ts) check both: when one fails the
 * transaction rolls back and the caller runs completeInTwoTrips instead.
 * The successors `next` may take are claimed (up to `next.max`), the rest
 * become heads left pending; no lane row is touched but those of the lanes
 * going idle (src/ledger/sql/lanes/advance.ts).
 */
export async function completeInOneTrip(
  send: Send,
  t: LedgerTables,
  entries: readonly CompletionEntry[],
  next: SuccessorClaim | undefined,
): Promise<BatchDone> {
  const heads = endedHeads(entries);
  const places = successorPlaces(heads);
  const lease = next && next.max > 0 ? grantLease(next) : undefined;
  const statements: RawBuilder<unknown>[] = [
    completionStatement(t, entries),
    refuseUnless(t, sql`ROW_COUNT() = ${inline(entries.length)}`),
  ];
  if (lease && next) {
    statements.push(
      sql`UPDATE ${t.items} FORCE INDEX (ix_lane) SET is_head = 1, ${leaseAssignments(lease)}
        WHERE ${places} AND state = 'pending' AND run_after <= NOW(6)${successorFilter(next)} LIMIT ${inline(
          next.max,
        )}`,
      sql`SET @lw_handed = ROW_COUNT()`,
    );
  } else {
    statements.push(sql`SET @lw_handed = 0`);
  }
  statements.push(
    headSuccessors(t, heads),
    sql`SET @lw_handed = @lw_handed + ROW_COUNT()`,
    idleLanes(t, heads),
    // Every lane handed on or gone idle: otherwise a successor was cancelled while it waited, or an enqueue into a lane
    // committed meanwhile.
    refuseUnless(t, sql`@lw_handed + ROW_COUNT() = ${inline(heads.length)}`),
    // Each lane was claimed on, headed on or made idle (the guard): the idle ones are read back by the lane rows' keys,
    // which TiDB plans far more cheaply than the successors' places on ix_lane.
    sql`SELECT queue, lane FROM ${t.lanes} WHERE ${laneIn(heads)} AND busy_from = 0`,
  );
  if (lease) {
    statements.push(
      sql`SELECT ${CLAIMED_COLUMNS} FROM ${t.items} FORCE INDEX (ix_lane) WHERE ${places} AND lease_token = ${inline(
        lease.token,
      )} AND state = 'processing'`,
    );
  }
  const results = await send(statements, { commit: true });
  const claimed = lease ? claimedItems((results.at(-1)?.rows ?? []) as unknown as ClaimedRow[], lease) : [];
  const idle = (results[lease ? results.length - 2 : results.length - 1]?.rows ?? []) as unknown as {
    queue: string;
    lane: string;
  }[];
  const notHeaded = new Set([
    ...idle.map((r) => queueScoped(r.queue, r.lane)),
    ...claimed.map((c) => queueScoped(c.queue, c.lane ?? '')),
  ]);
  const advanced = new Set(heads.map((h) => queueScoped(h.queue, h.lane)).filter((lane) => !notHeaded.has(lane)));
  return { won: entries.map(() => true), advanced, claimed };
}

/**
 * Two round trips. The first, with BEGIN: the CAS of every item, and the
 * read of each lane's successor at `lane_seq + 1`. The second: the
 * successors become heads (those `next` takes, claimed by it and read
 * back), the lanes without one go idle if their ended head was their last
 * item, and COMMIT. A lane that has neither (its successor was cancelled
 * while it waited, or an enqueue committed meanwhile) is settled under its
 * lane row's lock before the COMMIT.
 */
export async function completeInTwoTrips(
  send: Send,
  exec: Executor,
  t: LedgerTables,
  entries: readonly CompletionEntry[],
  next: SuccessorClaim | undefined,
): Promise<BatchDone> {
  const heads = endedHeads(entries);
  // Row-constructor IN: MariaDB plans it as a range on ix_lane in a SELECT but
  // as a full scan in an UPDATE, so the successors are found first, then updated by key.
  const [completed, found] = await send([
    completionStatement(t, entries),
    sql`SELECT id, queue, lane, type, queue_class, run_after <= NOW(6) AS due FROM ${t.items} FORCE INDEX (ix_lane)
      WHERE (queue, lane, lane_seq) IN (${sql.join(
        heads.map((h) => sql`(${inline(h.queue)}, ${inline(h.lane)}, ${inline(h.laneSeq + 1)})`),
      )})
        AND state = 'pending'`,
  ]);
  // Someone lost their lease: roll this batch back and let each item CAS on its
  // own, which tells exactly who won. Rare (expired leases), so the slow path is fine.
  if (completed?.affected !== entries.length) throw new PartialBatch();

  const successors = (found?.rows ?? []) as unknown as SuccessorRow[];
  const headed = new Set(successors.map((r) => queueScoped(r.queue, r.lane)));
  const mine = next ? successors.filter((r) => takes(next, r)).slice(0, next.max) : [];
  const mineIds = new Set(mine.map((r) => r.id));
  const left = successors.filter((r) => !mineIds.has(r.id));
  const advanced = new Set(left.map((r) => queueScoped(r.queue, r.lane)));
  const statements: RawBuilder<unknown>[] = [];
  if (left.length > 0) {
    statements.push(
      sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6) WHERE id IN (${list(
        left.map((r) => r.id),
      )}) AND state = 'pending'`,
    );
  }
  const lease = next && mine.length > 0 ? grantLease(next) : undefined;
  let claimedAt = -1;
  if (lease) {
    statements.push(
      ...claimSuccessors(
        t,
        lease,
        mine.map((r) => r.id),
      ),
    );
    claimedAt = statements.length - 1;
  }
  const unheaded = heads.filter((h) => !headed.has(queueScoped(h.queue, h.lane)));
  if (unheaded.length > 0) {
    statements.push(
      idleLanes(t, unheaded),
      sql`SELECT queue, lane FROM ${t.lanes} WHERE ${laneIn(unheaded)} AND busy_from <> 0`,
    );
  }
  const results = await send(statements, { commit: unheaded.length === 0 });
  const claimed = lease ? claimedItems((results[claimedAt]?.rows ?? []) as unknown as ClaimedRow[], lease) : [];
  // Lanes still busy without a successor head: settled one by one under their rows' locks, before the COMMIT.
  const busyRows = (unheaded.length > 0 ? (results.at(-1)?.rows ?? []) : []) as unknown as {
    queue: string;
    lane: string;
  }[];
  const stillBusy = new Set(busyRows.map((r) => queueScoped(r.queue, r.lane)));
  for (const h of unheaded) {
    if (stillBusy.has(queueScoped(h.queue, h.lane)) && (await advanceLocked(exec, t, h)))
      advanced.add(queueScoped(h.queue, h.lane));
  }
  return { won: entries.map(() => true), advanced, claimed };
}

interface SuccessorRow {
  id: string;
  queue: string;
  lane: string;
  type: string;
  queue_class: QueueClass;
  due: number;
}

function takes(next: SuccessorClaim, r: SuccessorRow): boolean {
  if (Number(r.due) !== 1) return false;
  if (next.classes && next.classes.length > 0 && !next.classes.includes(r.queue_class)) return false;
  return !next.types || next.types.length === 0 || next.types.includes(r.type);
}

/** The new heads become heads and claimed at once: the claim CAS's effect, then the read-back of what it won. */
function claimSuccessors(t: LedgerTables, lease: Lease, ids: readonly string[]): RawBuilder<unknown>[] {
  return [
    sql`UPDATE ${t.items} SET is_head = 1, ${leaseAssignments(lease)}
      WHERE id IN (${list(ids)}) AND state = 'pending' AND run_after <= NOW(6)`,
    readBackClaimed(t, ids, lease.token),
  ];
}
