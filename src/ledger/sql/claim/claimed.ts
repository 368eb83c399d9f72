import { sql, type RawBuilder } from 'kysely';
import { parseJson, type ClaimedRow } from '../../rows.js';
import { tableText, type LedgerTables } from '../../tables.js';
import { INLINE, type ValueWriter } from '../common/bound.js';
import type { ClaimedItem, QueueClass, SuccessorClaim } from '../../types.js';
import { list, nowPlusMsWritten, ownerColumn } from '../common/fragments.js';
import { givenKey, scopeOfKey } from '../keys/scope.js';

// What a claim writes and what its holder gets back: every claim (a claim
// round, a claim by ids, a lane successor claimed with a completion, an item
// inserted claimed) writes its lease columns from `leaseValues` and builds
// its items with `claimedItem`. Keep the two in step.

/** A lease a claim grants, its owner as the ledger stores it (`ownerColumn`, folded once per claim). */
export interface Lease {
  token: string;
  owner: string;
  leaseMs: number;
  epoch: number | null;
}

export function grantLease(l: {
  token: string;
  owner: string;
  leaseMs: number;
  epoch?: number | null | undefined;
}): Lease {
  return { token: l.token, owner: ownerColumn(l.owner), leaseMs: l.leaseMs, epoch: l.epoch ?? null };
}

/**
 * The lease columns a claim writes, as SQL text (its values through `w`, sql/common/bound.ts): processing, held by
 * `owner` with `token` until now + leaseMs, started now.
 */
export function leaseValues(
  l: Lease,
  w: ValueWriter = INLINE,
): { state: string; leaseOwner: string; leaseToken: string; leaseUntil: string; startedAt: string } {
  return {
    state: "'processing'",
    leaseOwner: w.value(l.owner),
    leaseToken: w.value(l.token),
    leaseUntil: nowPlusMsWritten(w, l.leaseMs),
    startedAt: 'NOW(6)',
  };
}

/** The conditions a completing consumer's claim of successors adds: its classes and types, when it names any. */
export function successorFilter(next: SuccessorClaim): RawBuilder<unknown> {
  const parts: RawBuilder<unknown>[] = [];
  if (next.classes && next.classes.length > 0) parts.push(sql` AND queue_class IN (${list(next.classes)})`);
  if (next.types && next.types.length > 0) parts.push(sql` AND type IN (${list(next.types)})`);
  return sql.join(parts, sql``);
}

/**
 * What a completing consumer's room has left once `claimed` holds what was claimed for it already (its items carry its
 * token).
 */
export function roomLeft(next: SuccessorClaim, claimed: readonly ClaimedItem[]): number {
  return next.max - claimed.filter((c) => c.leaseToken === next.token).length;
}

/** The SET of a claim's UPDATE: the lease, one more attempt, a fresh epoch and cancel flag. */
export function leaseAssignments(l: Lease): RawBuilder<unknown> {
  return sql.raw(leaseAssignmentsText(INLINE, l));
}

/** leaseAssignments as text, its values through `w` (sql/common/bound.ts). */
export function leaseAssignmentsText(w: ValueWriter, l: Lease): string {
  const v = leaseValues(l, w);
  return `state = ${v.state}, lease_token = ${v.leaseToken}, lease_owner = ${v.leaseOwner},
    lease_until = ${v.leaseUntil}, attempt = attempt + 1, epoch = ${w.value(l.epoch)},
    cancel_requested = 0, started_at = ${v.startedAt}, updated_at = NOW(6)`;
}

/**
 * The rows of `ids` a claim under `token` won: only the columns the claim
 * did not write. A consumer reads back hundreds of rows a second per slot,
 * and each column costs mariadbd to send and node to parse (a Date each).
 */
export function readBackClaimed(t: LedgerTables, ids: readonly string[], token: string): RawBuilder<unknown> {
  return sql.raw(readBackClaimedText(INLINE, t, ids, token));
}

/** readBackClaimed as text, its values through `w` (sql/common/bound.ts). */
export function readBackClaimedText(w: ValueWriter, t: LedgerTables, ids: readonly string[], token: string): string {
  return `SELECT ${CLAIMED_COLUMN_LIST} FROM ${tableText(t, 'items')} WHERE id IN (${w.ids(
    ids,
  )}) AND lease_token = ${w.value(token)} AND state = 'processing'`;
}

/** Plain text: bench/floor.ts sends it on raw connections. */
export const CLAIMED_COLUMN_LIST = `id, queue, type, lane, lane_seq, concurrency_key, queue_class, priority,
  payload, run_after, attempt, max_attempts,
  idempotency_key, dependency_key, probe_after, blocked_at, block_expires_at, checkpoint, progress, result,
    last_error, failure_class,
  replay_of, replayed_at, traceparent, created_at, started_at, workflow_id`;
export const CLAIMED_COLUMNS = sql.raw(CLAIMED_COLUMN_LIST);

/**
 * A row `readBackClaimed` returned, completed with what the claim wrote:
 * NOW(6) is one instant within a statement, so the lease runs from the
 * start time, and the update time is the start time. A claimed item is its
 * lane's head and has not ended.
 */
export function claimedItem(row: ClaimedRow, lease: Lease): ClaimedItem {
  // The same fields in the same order as toWorkItem: one object shape for every item.
  // Not toWorkItem({ ...row, … }): spreading a mysql2 row into a full row costs node CPU on every drained job.
  return {
    id: row.id,
    queue: row.queue,
    type: row.type,
    lane: row.lane,
    laneSeq: row.lane_seq === null ? null : Number(row.lane_seq),
    isHead: true,
    concurrencyKey: givenKey(row.concurrency_key ?? null),
    keyScope: scopeOfKey(row.concurrency_key ?? null),
    queueClass: row.queue_class as QueueClass,
    priority: row.priority,
    payload: parseJson(row.payload),
    state: 'processing',
    runAfter: row.run_after,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    leaseOwner: lease.owner,
    leaseToken: lease.token,
    leaseUntil: new Date(row.started_at.getTime() + lease.leaseMs),
    epoch: lease.epoch,
    idempotencyKey: row.idempotency_key,
    dependencyKey: row.dependency_key,
    probeAfter: row.probe_after,
    blockedAt: row.blocked_at,
    blockExpiresAt: row.block_expires_at,
    cancelRequested: false,
    checkpoint: parseJson(row.checkpoint),
    progress: parseJson(row.progress),
    // A claimed head leads its own group (the column may name one it was in before).
    groupHead: null,
    result: parseJson(row.result),
    lastError: row.last_error,
    failureClass: row.failure_class,
    replayOf: row.replay_of,
    replayedAt: row.replayed_at,
    traceparent: row.traceparent ?? null,
    createdAt: row.created_at,
    startedAt: row.started_at,
    terminalAt: null,
    updatedAt: row.started_at,
    ...(row.workflow_id ? { workflowId: row.workflow_id } : {}),
  };
}

export function claimedItems(rows: readonly ClaimedRow[], lease: Lease): ClaimedItem[] {
  return rows.map((r) => claimedItem(r, lease));
}
