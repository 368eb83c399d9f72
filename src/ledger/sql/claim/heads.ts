import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { Executor, LedgerDb } from '../../connection.js';
import { newLeaseToken } from '../../ids.js';
import { CLAIM_RETRY, retryOnConflict } from '../../retry.js';
import type { ClaimedRow } from '../../rows.js';
import type { LedgerTables } from '../../tables.js';
import type { ClaimedItem, ClaimOutcome, QueueClass } from '../../types.js';
import { QUEUE_CLASSES } from '../../types.js';
import { claimUnderCap, type CandidatesInTurn } from '../fleet/fleet-cap.js';
import { INLINE } from '../common/bound.js';
import { claimedItems, grantLease, readBackClaimed } from './claimed.js';
import { joinGroups } from './coalesce.js';
import { list } from '../common/fragments.js';
import { type ClaimSpec, withGroups, casClaim, casText } from './cas.js';
import { type Candidate, candidateCount, pick, inDueOrder } from './pick.js';

export interface ClaimHeadsSpec extends ClaimSpec {
  limit: number;
  classes?: readonly QueueClass[] | undefined;
  types?: readonly string[] | undefined;
}

/** How many of each class's earliest due heads a stale-only claim looks through for rescued items. */
export const STALE_WINDOW = 1000;

/**
 * Claims up to `limit` due lane heads: a plain candidate read (one ordered,
 * limited index range per class), then one CAS UPDATE by primary key that
 * re-checks every claimable condition, then a primary-key read of what this
 * token won. No UPDATE … ORDER BY … LIMIT: on MariaDB that reads and locks
 * the whole claimable range.
 */
export async function claimHeads(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: ClaimHeadsSpec,
): Promise<ClaimOutcome> {
  if (spec.maxProcessing !== undefined) return claimHeadsUnderCap(db, caps, t, spec, spec.maxProcessing);
  // A victim of the server (a deadlock, a lock wait timeout, a TiDB write conflict) wrote nothing: claim again.
  const claimed = await retryOnConflict(() => claimHeadsOnce(db, caps, t, spec), CLAIM_RETRY);
  return { ...claimed, items: await withGroups(db, t, claimed.items, spec) };
}

async function claimHeadsOnce(
  exec: Executor,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: ClaimHeadsSpec,
): Promise<ClaimOutcome> {
  const candidates = await readCandidates(exec, t, spec);
  if (candidates.length === 0) return { items: [], moreAvailable: false };
  const chosen = pick(candidates, spec.limit);
  const items = await casClaim(exec, caps, t, spec, chosen);
  return { items, moreAvailable: candidates.length > chosen.length };
}

/**
 * Under a fleet cap the turn takes the earliest due of the candidates still
 * claimable, as many as the room allows (sql/fleet/fleet-cap.ts); on MariaDB and
 * MySQL the candidates are read first, outside it, and on TiDB inside it.
 */
async function claimHeadsUnderCap(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: ClaimHeadsSpec,
  maxProcessing: number,
): Promise<ClaimOutcome> {
  const inTurn = caps.family === 'tidb';
  const candidates = inTurn ? [] : await readCandidates(db, t, spec);
  if (!inTurn && candidates.length === 0) return { items: [], moreAvailable: false };
  const from = {
    ids: candidates.map((c) => c.id),
    candidates: inTurn
      ? {
          read: candidatesQuery(t, spec),
          ids: (rows: readonly unknown[]) => inDueOrder(rows as Candidate[]).map((r) => r.id),
        }
      : undefined,
  };
  const items = await casClaimUnderCap(db, caps, t, spec, maxProcessing, from, spec.limit);
  return { items, moreAvailable: items.length >= spec.limit || candidates.length > items.length };
}

/**
 * The CAS of `ids` (or, on TiDB, of `candidates` read in the turn) under the queue's cap: at most `want`, fewer when
 * the cap leaves less room.
 */
export function casClaimUnderCap(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: ClaimSpec,
  maxProcessing: number,
  from: { ids: readonly string[]; candidates?: CandidatesInTurn | undefined },
  want: number,
  types?: readonly string[],
): Promise<ClaimedItem[]> {
  const lease = grantLease({ token: newLeaseToken(), owner: spec.owner, leaseMs: spec.leaseMs, epoch: spec.epoch });
  return claimUnderCap<ClaimedRow, ClaimedItem>(db, caps, t, {
    queue: spec.queue,
    maxProcessing,
    want,
    ids: from.ids,
    candidates: from.candidates,
    cas: (ids) => casText(INLINE, t, spec, ids, lease, types, ''),
    readBack: (ids) => readBackClaimed(t, ids, lease.token) as RawBuilder<ClaimedRow>,
    won: (rows) => claimedItems(rows, lease),
    inTurn:
      spec.coalesce === undefined
        ? undefined
        : (trx, heads, roomLeft) =>
            joinGroups(trx, t, heads, spec.coalesce!, { budget: roomLeft, inTransaction: true }),
  });
}

async function readCandidates(exec: Executor, t: LedgerTables, spec: ClaimHeadsSpec): Promise<Candidate[]> {
  return (await candidatesQuery(t, spec).execute(exec)).rows;
}

/**
 * Due pending lane heads of the claim's classes (and types), earliest first per class: one ordered, limited index range
 * each.
 * Stale-only, the rescued ones among the first STALE_WINDOW due heads of each class: a reclaimed item kept its
 * due time, so it is near the front of its priority, and a stale-only claim reads a bounded range however deep
 * the backlog it leaves waiting (the index has no failure class).
 */
function candidatesQuery(t: LedgerTables, spec: ClaimHeadsSpec): RawBuilder<Candidate> {
  const classes = spec.classes && spec.classes.length > 0 ? spec.classes : QUEUE_CLASSES;
  const want = candidateCount(spec.limit);
  const typeFilter = spec.types && spec.types.length > 0 ? sql`AND type IN (${list(spec.types)})` : sql``;
  if (spec.staleOnly === true) {
    const perClass = classes.map(
      (c) => sql`(SELECT id, priority, due_us FROM (SELECT id, priority, failure_class, TIMESTAMPDIFF(MICROSECOND,
        '2020-01-01', run_after) AS due_us FROM ${t.items}
        WHERE queue = ${spec.queue} AND queue_class = ${c} AND state = 'pending' AND is_head = 1
          AND run_after <= NOW(6) ${typeFilter}
        ORDER BY priority, run_after LIMIT ${STALE_WINDOW}) AS w WHERE w.failure_class = 'lease_expired' LIMIT ${
          want
        })`,
    );
    return sql<Candidate>`${sql.join(perClass, sql` UNION ALL `)}`;
  }
  const perClass = classes.map(
    (c) => sql`(SELECT id, priority, TIMESTAMPDIFF(MICROSECOND, '2020-01-01', run_after) AS due_us FROM ${t.items}
      WHERE queue = ${spec.queue} AND queue_class = ${c} AND state = 'pending' AND is_head = 1
        AND run_after <= NOW(6) ${typeFilter}
      ORDER BY priority, run_after LIMIT ${want})`,
  );
  return sql<Candidate>`${sql.join(perClass, sql` UNION ALL `)}`;
}
