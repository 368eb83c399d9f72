import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../connection.js';
import { newLeaseToken } from '../ids.js';
import { isConnectionError, readAfterLostConnection } from '../retry.js';
import { parseJson, type ClaimedRow } from '../rows.js';
import type { LedgerTables } from '../tables.js';
import type { ClaimedItem, ClaimOutcome, QueueClass } from '../types.js';
import { QUEUE_CLASSES } from '../types.js';
import { affected, inline, list, nowPlusMs, ownerColumn } from './common.js';

export interface ClaimSpec {
  queue: string;
  owner: string;
  leaseMs: number;
  /**
   * The connection accepts several statements per query: send the CAS and the
   * read-back together, one round trip instead of two.
   */
  multiStatement?: boolean | undefined;
  /** Claims are fenced by this ownership epoch when given (docs/design.md §7). */
  epoch?: number | undefined;
}

export interface ClaimHeadsSpec extends ClaimSpec {
  limit: number;
  classes?: readonly QueueClass[] | undefined;
  types?: readonly string[] | undefined;
}

/**
 * How many candidates to read for `limit` wanted items. Picking at random
 * among more than are wanted spreads concurrent claimers apart, at the cost
 * of strict due order within a priority: small claims read eight times their
 * size, large ones (prefetching consumers) twice plus a margin, since reading
 * candidates costs about as much per row as claiming them.
 */
export function candidateCount(limit: number): number {
  return Math.min(MAX_CANDIDATES, limit * CANDIDATE_FACTOR, limit * 2 + 256);
}
const CANDIDATE_FACTOR = 8;
const MAX_CANDIDATES = 1000;

/**
 * Claims up to `limit` due lane heads: a plain candidate read (one ordered,
 * limited index range per class), then one CAS UPDATE by primary key that
 * re-checks every claimable condition, then a primary-key read of what this
 * token won. No UPDATE … ORDER BY … LIMIT: on MariaDB that reads and locks
 * the whole claimable range.
 */
export async function claimHeads(exec: Executor, t: LedgerTables, spec: ClaimHeadsSpec): Promise<ClaimOutcome> {
  const classes = spec.classes && spec.classes.length > 0 ? spec.classes : QUEUE_CLASSES;
  const want = candidateCount(spec.limit);
  const typeFilter = spec.types && spec.types.length > 0 ? sql`AND type IN (${list(spec.types)})` : sql``;
  const perClass = classes.map(
    (c) => sql`(SELECT id, priority, run_after FROM ${t.items}
      WHERE queue = ${spec.queue} AND queue_class = ${c} AND state = 'pending' AND is_head = 1
        AND run_after <= NOW(6) ${typeFilter}
      ORDER BY priority, run_after LIMIT ${want})`,
  );
  const candidates = await sql<{ id: string; priority: number; run_after: Date }>`${sql.join(perClass, sql` UNION ALL `)}`.execute(exec);
  if (candidates.rows.length === 0) return { items: [], moreAvailable: false };

  const chosen = pick(candidates.rows, spec.limit);
  const items = await casClaim(exec, t, spec, chosen);
  return { items, moreAvailable: candidates.rows.length > chosen.length };
}

/** A lease a claim grants (here, and for lane successors claimed with a completion). */
export interface Lease {
  token: string;
  owner: string;
  leaseMs: number;
  epoch?: number | undefined;
}

/**
 * What every claim writes: processing under a fresh lease, one more
 * attempt. `claimedItem` relies on it: keep the two in step.
 */
export function leaseAssignments(lease: Lease): RawBuilder<unknown> {
  return sql`state = 'processing', lease_token = ${inline(lease.token)}, lease_owner = ${inline(ownerColumn(lease.owner))},
    lease_until = ${nowPlusMs(lease.leaseMs)}, attempt = attempt + 1, epoch = ${inline(lease.epoch ?? null)},
    cancel_requested = 0, started_at = NOW(6), updated_at = NOW(6)`;
}

/**
 * The rows of `ids` a claim under `token` won: only the columns the claim
 * did not write. A consumer reads back hundreds of rows a second per slot,
 * and each column costs mariadbd to send and node to parse (a Date each).
 */
export function readBackClaimed(t: LedgerTables, ids: readonly string[], token: string): RawBuilder<unknown> {
  return sql`SELECT ${CLAIMED_COLUMNS} FROM ${t.items} WHERE id IN (${list(ids)}) AND lease_token = ${inline(token)} AND state = 'processing'`;
}

/** Plain text: bench/floor.ts sends it on raw connections. */
export const CLAIMED_COLUMN_LIST = `id, queue, type, lane, lane_seq, queue_class, priority, payload, run_after, attempt, max_attempts,
  idempotency_key, dependency_key, probe_after, blocked_at, block_expires_at, checkpoint, result, last_error, failure_class,
  replay_of, replayed_at, created_at, started_at`;
const CLAIMED_COLUMNS = sql.raw(CLAIMED_COLUMN_LIST);

/**
 * A row `readBackClaimed` returned, completed with what `leaseAssignments`
 * wrote: NOW(6) is one instant within a statement, so the lease runs from
 * the start time, and the update time is the start time. A claimed item is
 * its lane's head and has not ended.
 */
export function claimedItem(row: ClaimedRow, lease: Lease): ClaimedItem {
  // The same fields in the same order as toWorkItem: one object shape for every item.
  // Not toWorkItem({ ...row, … }): spreading a mysql2 row into a full row
  // measured 58 µs of node CPU per drained job against 25.
  return {
    id: row.id,
    queue: row.queue,
    type: row.type,
    lane: row.lane,
    laneSeq: row.lane_seq === null ? null : Number(row.lane_seq),
    isHead: true,
    queueClass: row.queue_class as QueueClass,
    priority: row.priority,
    payload: parseJson(row.payload),
    state: 'processing',
    runAfter: row.run_after,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    leaseOwner: ownerColumn(lease.owner),
    leaseToken: lease.token,
    leaseUntil: new Date(row.started_at.getTime() + lease.leaseMs),
    epoch: lease.epoch ?? null,
    idempotencyKey: row.idempotency_key,
    dependencyKey: row.dependency_key,
    probeAfter: row.probe_after,
    blockedAt: row.blocked_at,
    blockExpiresAt: row.block_expires_at,
    cancelRequested: false,
    checkpoint: parseJson(row.checkpoint),
    result: parseJson(row.result),
    lastError: row.last_error,
    failureClass: row.failure_class,
    replayOf: row.replay_of,
    replayedAt: row.replayed_at,
    createdAt: row.created_at,
    startedAt: row.started_at,
    terminalAt: null,
    updatedAt: row.started_at,
  };
}

/**
 * Claims exactly these ids if each is still a due pending head (targeted
 * wake-ups), and of `types` when given: a wake-up names items of any type,
 * and a consumer that claims only some types must not take the others.
 */
export async function claimByIds(
  exec: Executor,
  t: LedgerTables,
  spec: ClaimSpec & { ids: readonly string[]; types?: readonly string[] | undefined },
): Promise<ClaimedItem[]> {
  if (spec.ids.length === 0) return [];
  const typeGuard = spec.types && spec.types.length > 0 ? sql`AND type IN (${list(spec.types)})` : undefined;
  return casClaim(exec, t, spec, spec.ids, typeGuard);
}

async function casClaim(exec: Executor, t: LedgerTables, spec: ClaimSpec, ids: readonly string[], extraGuard?: RawBuilder<unknown>): Promise<ClaimedItem[]> {
  const token = newLeaseToken();
  const epochGuard: RawBuilder<unknown> =
    spec.epoch === undefined
      ? sql``
      : sql`AND EXISTS (SELECT 1 FROM ${t.ownership} o WHERE o.queue = ${inline(spec.queue)} AND o.epoch = ${inline(spec.epoch)})`;
  const cas = sql`UPDATE ${t.items} SET ${leaseAssignments({ token, owner: spec.owner, leaseMs: spec.leaseMs, epoch: spec.epoch })}
    WHERE id IN (${list(ids)}) AND queue = ${inline(spec.queue)} AND state = 'pending' AND is_head = 1
      AND run_after <= NOW(6) ${epochGuard} ${extraGuard ?? sql``}`;
  const readBack = readBackClaimed(t, ids, token);
  let rows: ClaimedRow[];
  try {
    if (spec.multiStatement) {
      // Both statements in one query: mysql2 answers with one result per statement.
      const both = await sql`${cas}; ${readBack}`.execute(exec);
      const [, selected] = both.rows as unknown as [unknown, ClaimedRow[]];
      rows = selected;
    } else {
      if (affected(await cas.execute(exec)) === 0) return [];
      rows = (await readBack.$castTo<ClaimedRow>().execute(exec)).rows;
    }
  } catch (error) {
    if (!isConnectionError(error)) throw error;
    // The CAS may have committed with its answer lost: items held under a token
    // nobody knows would sit until their lease expired, each costing an attempt.
    // The token is ours alone, so reading it back on a fresh connection finds
    // exactly what this claim won; the locking read waits for a CAS still running.
    rows = await readAfterLostConnection(async () => (await sql<ClaimedRow>`${readBack} FOR UPDATE`.execute(exec)).rows, error);
  }
  const lease: Lease = { token, owner: spec.owner, leaseMs: spec.leaseMs, epoch: spec.epoch };
  return rows.map((r) => claimedItem(r, lease));
}

/**
 * Takes `limit` candidates in priority order; within the priority group that
 * straddles the cut, picks at random so concurrent claimers reading the same
 * candidates collide less.
 */
function pick(rows: readonly { id: string; priority: number; run_after: Date }[], limit: number): string[] {
  const sorted = [...rows].sort((a, b) => a.priority - b.priority || a.run_after.getTime() - b.run_after.getTime());
  const out: string[] = [];
  let i = 0;
  while (i < sorted.length && out.length < limit) {
    const p = sorted[i]!.priority;
    let j = i;
    while (j < sorted.length && sorted[j]!.priority === p) j++;
    const group = sorted.slice(i, j);
    const need = limit - out.length;
    if (group.length <= need) {
      for (const r of group) out.push(r.id);
    } else {
      // Prefer the earliest due of this group: sample from a window CANDIDATE_FACTOR × `need` wide.
      const window = group.slice(0, Math.min(group.length, candidateCount(need)));
      for (let k = 0; k < need; k++) {
        const at = k + Math.floor(Math.random() * (window.length - k));
        const tmp = window[k]!;
        window[k] = window[at]!;
        window[at] = tmp;
        out.push(window[k]!.id);
      }
    }
    i = j;
  }
  return out;
}
