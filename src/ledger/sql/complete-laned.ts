import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../connection.js';
import { PartialBatch } from '../../errors.js';
import { errno } from '../retry.js';
import type { LedgerTables } from '../tables.js';
import type { ClaimedRow } from '../rows.js';
import type { ClaimedItem, LeaseHandle, QueueClass, SuccessorClaim } from '../types.js';
import { CLAIMED_COLUMNS, claimedItems, grantLease, leaseAssignments, readBackClaimed, type Lease } from './claimed.js';
import { inline, laneIn, list, literal, queueScoped } from './common.js';
import { completionStatement, type CompletionEntry } from './completion-cas.js';
import type { Send } from './pipeline.js';
import { advanceHead } from './transition.js';

export interface BatchDone {
  /** Per entry: whether its CAS won. */
  won: boolean[];
  /** Lanes whose new head was left pending for a claim. */
  advanced: Set<string>;
  /** Successors claimed under the SuccessorClaim's lease. */
  claimed: ClaimedItem[];
}

/** What the guard of the one-round-trip path raises: "Subquery returns more than 1 row". */
const GUARD_ERRNO = 1242;

/** The one-round-trip path's guard refused the batch (see completeInOneTrip): the general path is for it. */
export function isGuardRefusal(error: unknown): boolean {
  return errno(error) === GUARD_ERRNO;
}

/** The laned items' successors: each lane's next position, as ranges on ix_lane. */
function successorPlaces(laned: readonly LeaseHandle[]): RawBuilder<unknown> {
  return sql.raw(
    `(${laned.map((h) => `(queue = ${literal(h.queue)} AND lane = ${literal(h.lane)} AND lane_seq = ${literal((h.laneSeq ?? 0) + 1)})`).join(' OR ')})`,
  );
}

/**
 * A laned batch in a transaction of one round trip, for the common case:
 * every CAS wins, and every lane that still has unfinished items has its
 * `lane_seq + 1` pending (sequences are gap free, so that is its
 * successor). Guards after the CAS check both. When either fails it
 * raises an error, the transaction rolls back, and the caller runs
 * completeInTwoTrips instead. A guard is plain SQL: a subquery that returns
 * rows only when its check fails, which every server refuses as a scalar
 * when there are two (uncorrelated, so TiDB, which runs it while planning,
 * sees the same data). Then the successors `next` may take are claimed (up
 * to `next.max`), the rest become heads left pending; the lanes read with
 * the guard, less those whose successor was claimed, are the ones advanced.
 */
export async function completeInOneTrip(send: Send, t: LedgerTables, entries: readonly CompletionEntry[], next: SuccessorClaim | undefined): Promise<BatchDone> {
  const laned = entries.filter((e) => e.handle.lane !== null).map((e) => e.handle);
  const lanes = laneIn(laned);
  const places = successorPlaces(laned);
  const lease = next && next.max > 0 ? grantLease(next) : undefined;
  // Raises GUARD_ERRNO when `holds` is false: the migrations table has a row per applied
  // schema version, so at least two on any ledger this code runs on.
  const refuseUnless = (holds: RawBuilder<unknown>): RawBuilder<unknown> => sql`(SELECT 1 FROM ${t.migrations} WHERE NOT (${holds}))`;
  const statements: RawBuilder<unknown>[] = [
    sql`UPDATE ${t.lanes} SET active = active - 1 WHERE ${lanes}`,
    completionStatement(t, entries),
    sql`SET @lw_guard = ${refuseUnless(sql`ROW_COUNT() = ${inline(entries.length)}`)}`,
    // The lanes with unfinished items, each refused unless every one of them has its successor pending.
    sql`SELECT queue, lane, ${refuseUnless(sql`(SELECT COUNT(*) FROM ${t.lanes} WHERE ${lanes} AND active > 0)
        = (SELECT COUNT(*) FROM ${t.items} FORCE INDEX (ix_lane) WHERE ${places} AND state = 'pending')`)} AS lw_guard
      FROM ${t.lanes} WHERE ${lanes} AND active > 0`,
  ];
  if (lease && next) {
    statements.push(
      sql`UPDATE ${t.items} FORCE INDEX (ix_lane) SET is_head = 1, ${leaseAssignments(lease)}
        WHERE ${places} AND state = 'pending' AND run_after <= NOW(6)${successorFilter(next)} LIMIT ${inline(next.max)}`,
    );
  }
  statements.push(sql`UPDATE ${t.items} FORCE INDEX (ix_lane) SET is_head = 1, updated_at = NOW(6) WHERE ${places} AND state = 'pending'`);
  if (lease) {
    statements.push(sql`SELECT ${CLAIMED_COLUMNS} FROM ${t.items} FORCE INDEX (ix_lane) WHERE ${places} AND lease_token = ${inline(lease.token)} AND state = 'processing'`);
  }
  const results = await send(statements, { commit: true });
  const claimed = lease ? claimedItems((results.at(-1)?.rows ?? []) as unknown as ClaimedRow[], lease) : [];
  const taken = new Set(claimed.map((c) => queueScoped(c.queue, c.lane ?? '')));
  const busy = (results[3]?.rows ?? []) as unknown as { queue: string; lane: string }[];
  const advanced = new Set(busy.map((r) => queueScoped(r.queue, r.lane)).filter((k) => !taken.has(k)));
  return { won: entries.map(() => true), advanced, claimed };
}

/**
 * Two round trips. The first, with BEGIN: lane rows first (the order every
 * lane-touching transaction uses), the CAS of every item, and the reads that
 * find each lane's successor. The second: the successors become heads (those
 * `next` takes, claimed by it and read back), and COMMIT. A lane that still
 * has unfinished items but whose `lane_seq + 1` is not pending (cancelled
 * while waiting) gets its first pending item as head, and it is left pending.
 */
export async function completeInTwoTrips(send: Send, exec: Executor, t: LedgerTables, entries: readonly CompletionEntry[], next: SuccessorClaim | undefined): Promise<BatchDone> {
  const laned = entries.filter((e) => e.handle.lane !== null);
  const lanes = laneIn(laned.map((e) => e.handle));
  // Row-constructor IN: MariaDB plans it as a range on ix_lane in a SELECT but
  // as a full scan in an UPDATE, so the successors are found first, then updated by key.
  const [, completed, active, found] = await send([
    sql`UPDATE ${t.lanes} SET active = active - 1 WHERE ${lanes}`,
    completionStatement(t, entries),
    sql`SELECT queue, lane, active FROM ${t.lanes} WHERE ${lanes}`,
    sql`SELECT id, queue, lane, type, queue_class, run_after <= NOW(6) AS due FROM ${t.items} FORCE INDEX (ix_lane)
      WHERE (queue, lane, lane_seq) IN (${sql.join(laned.map((e) => sql`(${inline(e.handle.queue)}, ${inline(e.handle.lane)}, ${inline((e.handle.laneSeq ?? 0) + 1)})`))})
        AND state = 'pending'`,
  ]);
  // Someone lost their lease: roll this batch back and let each item CAS on its
  // own, which tells exactly who won. Rare (expired leases), so the slow path is fine.
  if (completed?.affected !== entries.length) throw new PartialBatch();

  const busy = new Set((active?.rows ?? []).filter((r) => Number(r.active) > 0).map((r) => queueScoped(String(r.queue), String(r.lane))));
  const successors = ((found?.rows ?? []) as unknown as SuccessorRow[]).filter((r) => busy.has(queueScoped(r.queue, r.lane)));
  const headed = new Set(successors.map((r) => queueScoped(r.queue, r.lane)));
  const mine = next ? successors.filter((r) => takes(next, r)).slice(0, next.max) : [];
  const mineIds = new Set(mine.map((r) => r.id));
  const left = successors.filter((r) => !mineIds.has(r.id));
  const advanced = new Set(left.map((r) => queueScoped(r.queue, r.lane)));
  const statements: RawBuilder<unknown>[] = [];
  if (left.length > 0) {
    statements.push(sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6) WHERE id IN (${list(left.map((r) => r.id))}) AND state = 'pending'`);
  }
  const lease = next && mine.length > 0 ? grantLease(next) : undefined;
  if (lease) statements.push(...claimSuccessors(t, lease, mine.map((r) => r.id)));
  const stragglers = laned.filter((e) => {
    const k = queueScoped(e.handle.queue, e.handle.lane ?? '');
    return busy.has(k) && !headed.has(k);
  });
  const results = await send(statements, { commit: stragglers.length === 0 });
  const claimed = lease ? claimedItems((results.at(-1)?.rows ?? []) as unknown as ClaimedRow[], lease) : [];
  for (const e of stragglers) {
    if (await advanceHead(exec, t, { queue: e.handle.queue, lane: e.handle.lane, laneSeq: e.handle.laneSeq })) {
      advanced.add(queueScoped(e.handle.queue, e.handle.lane ?? ''));
    }
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

function successorFilter(next: SuccessorClaim): RawBuilder<unknown> {
  const parts: RawBuilder<unknown>[] = [];
  if (next.classes && next.classes.length > 0) parts.push(sql` AND queue_class IN (${list(next.classes)})`);
  if (next.types && next.types.length > 0) parts.push(sql` AND type IN (${list(next.types)})`);
  return sql.join(parts, sql``);
}

/** The new heads become heads and claimed at once: the claim CAS's effect, then the read-back of what it won. */
function claimSuccessors(t: LedgerTables, lease: Lease, ids: readonly string[]): RawBuilder<unknown>[] {
  return [
    sql`UPDATE ${t.items} SET is_head = 1, ${leaseAssignments(lease)}
      WHERE id IN (${list(ids)}) AND state = 'pending' AND run_after <= NOW(6)`,
    readBackClaimed(t, ids, lease.token),
  ];
}
