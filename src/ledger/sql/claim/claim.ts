import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { Executor, LedgerDb } from '../../connection.js';
import { newLeaseToken } from '../../ids.js';
import { CLAIM_RETRY, isConnectionError, readAfterLostConnection, retryOnConflict } from '../../retry.js';
import type { ClaimedRow } from '../../rows.js';
import { tableText, type LedgerTables } from '../../tables.js';
import type { ClaimedItem, ClaimOutcome, QueueClass } from '../../types.js';
import { QUEUE_CLASSES } from '../../types.js';
import { claimUnderCap, type CandidatesInTurn } from '../fleet/fleet-cap.js';
import { bindable, INLINE, statementFor, type ValueWriter } from '../common/bound.js';
import {
  CLAIMED_COLUMNS,
  claimedItems,
  grantLease,
  leaseAssignmentsText,
  readBackClaimed,
  readBackClaimedText,
  type Lease,
} from './claimed.js';
import { joinGroups, type CoalesceSpec } from './coalesce.js';
import { affected, list } from '../common/fragments.js';

export interface ClaimSpec {
  queue: string;
  owner: string;
  leaseMs: number;
  /** Claims are fenced by this ownership epoch when given (docs/design.md §7). */
  epoch?: number | undefined;
  /** Heads of these types take their lane's next pending items of their type with them (docs/design.md §4, Coalescing). */
  coalesce?: CoalesceSpec | undefined;
  /** The queue's fleet cap: the claim takes no more than leaves this many processing (docs/design.md §6, "The fleet cap"). */
  maxProcessing?: number | undefined;
  /** Only rescued work: pending heads whose last lease expired (docs/design.md §6, "Stale-only claims"). */
  staleOnly?: boolean | undefined;
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
 * claimable, as many as the room allows (admission.ts); on MariaDB and
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

/** The CAS of `ids` (or, on TiDB, of `candidates` read in the turn) under the queue's cap: at most `want`, fewer when the cap leaves less room. */
function casClaimUnderCap(
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
 * Due pending lane heads of the claim's classes (and types), earliest first per class: one ordered, limited index range each.
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
      (
        c,
      ) => sql`(SELECT id, priority, due_us FROM (SELECT id, priority, failure_class, TIMESTAMPDIFF(MICROSECOND, '2020-01-01', run_after) AS due_us FROM ${t.items}
        WHERE queue = ${spec.queue} AND queue_class = ${c} AND state = 'pending' AND is_head = 1
          AND run_after <= NOW(6) ${typeFilter}
        ORDER BY priority, run_after LIMIT ${STALE_WINDOW}) AS w WHERE w.failure_class = 'lease_expired' LIMIT ${want})`,
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

interface Candidate {
  id: string;
  priority: number;
  /** run_after in microseconds: a JS Date keeps milliseconds, and the heads of several classes due in one millisecond must still merge in due order. */
  due_us: number | string;
}

/**
 * The heads' groups, for a consumer that coalesces some types; after the CAS, so a conflict there never
 * runs the CAS again. Under a fleet cap the members count too: together they take at most `budget`.
 */
function withGroups(
  exec: Executor,
  t: LedgerTables,
  heads: ClaimedItem[],
  spec: ClaimSpec,
  opts: { budget?: number; inTransaction?: boolean } = {},
): Promise<ClaimedItem[]> | ClaimedItem[] {
  return spec.coalesce === undefined || heads.length === 0 ? heads : joinGroups(exec, t, heads, spec.coalesce, opts);
}

/**
 * Claims exactly these ids if each is still a due pending head (targeted
 * wake-ups), and of `types` when given: a wake-up names items of any type,
 * and a consumer that claims only some types must not take the others.
 */
export async function claimByIds(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: ClaimSpec & { ids: readonly string[]; types?: readonly string[] | undefined },
): Promise<ClaimedItem[]> {
  if (spec.ids.length === 0) return [];
  if (spec.maxProcessing !== undefined)
    return casClaimUnderCap(db, caps, t, spec, spec.maxProcessing, { ids: spec.ids }, spec.ids.length, spec.types);
  return withGroups(
    db,
    t,
    await retryOnConflict(() => casClaim(db, caps, t, spec, spec.ids, { types: spec.types }), CLAIM_RETRY),
    spec,
  );
}

/**
 * The items held under this lease now: what a producer inserted claimed
 * under a consumer's offer whose handoff never arrived (the producer died
 * after its commit, or Redis failed then). One index range: the queue's
 * processing items of these classes.
 */
export async function readHeldUnderLease(
  exec: Executor,
  t: LedgerTables,
  spec: { queue: string; classes: readonly QueueClass[]; owner: string; token: string; leaseMs: number },
): Promise<ClaimedItem[]> {
  const lease = grantLease({ token: spec.token, owner: spec.owner, leaseMs: spec.leaseMs });
  const rows = await sql<ClaimedRow>`SELECT ${CLAIMED_COLUMNS} FROM ${t.items}
    WHERE queue = ${spec.queue} AND queue_class IN (${list(spec.classes)}) AND state = 'processing' AND lease_token = ${spec.token}`.execute(
    exec,
  );
  return claimedItems(rows.rows, lease);
}

interface CasOptions {
  /** Only items of these types (a claim by ids of a consumer that claims only some). */
  types?: readonly string[] | undefined;
  /** The lease token to grant; a fresh one when absent. */
  token?: string;
  /** Run inside the caller's transaction: a lost connection there rolled it back, and the caller runs it again. */
  inTransaction?: boolean;
}

async function casClaim(
  exec: Executor,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: ClaimSpec,
  ids: readonly string[],
  { types, token, inTransaction }: CasOptions = {},
): Promise<ClaimedItem[]> {
  const lease = grantLease({
    token: token ?? newLeaseToken(),
    owner: spec.owner,
    leaseMs: spec.leaseMs,
    epoch: spec.epoch,
  });
  const way = casWay(exec, caps, inTransaction === true, ids.length, types?.length ?? 0);
  const cas = statementFor(way.prepared, (w) => casText(w, t, spec, ids, lease, types, way.hint));
  const readBack = statementFor(way.prepared, (w) => readBackClaimedText(w, t, ids, lease.token));
  let rows: ClaimedRow[];
  try {
    if (caps.multiStatement && !way.prepared) {
      // Both statements in one query: mysql2 answers with one result per statement.
      const both = await sql`${cas}; ${readBack}`.execute(way.exec);
      const [, selected] = both.rows as unknown as [unknown, ClaimedRow[]];
      rows = selected;
    } else {
      if (affected(await cas.execute(way.exec)) === 0) return [];
      rows = (await readBack.$castTo<ClaimedRow>().execute(way.exec)).rows;
    }
  } catch (error) {
    if (inTransaction === true || !isConnectionError(error)) throw error;
    // The CAS may have committed with its answer lost: items held under a token
    // nobody knows would sit until their lease expired, each costing an attempt.
    // The token is ours alone, so reading it back on a fresh connection finds
    // exactly what this claim won; the locking read waits for a CAS still running.
    rows = await readAfterLostConnection(
      async () => (await sql<ClaimedRow>`${readBackClaimed(t, ids, lease.token)} FOR UPDATE`.execute(way.exec)).rows,
      error,
    );
  }
  return claimedItems(rows, lease);
}

/**
 * Claims each of `ids` still a due pending head (and of `types`, when
 * given) for `lease`. By primary key, whatever the planner would choose:
 * every claim then locks its rows in key order, so two claims of
 * overlapping ids wait for each other but never deadlock. `queue = …` makes
 * the secondary indexes that start with the queue usable: MariaDB chose
 * ix_created for a claim naming every row of a tiny queue, and locked its
 * rows in that index's order instead.
 */
function casText(
  w: ValueWriter,
  t: LedgerTables,
  spec: ClaimSpec,
  ids: readonly string[],
  lease: Lease,
  types: readonly string[] | undefined,
  hint: string,
): string {
  const epochGuard =
    spec.epoch === undefined
      ? ''
      : `AND EXISTS (SELECT 1 FROM ${tableText(t, 'ownership')} o WHERE o.queue = ${w.value(spec.queue)} AND o.epoch = ${w.value(spec.epoch)})`;
  const typeGuard = types === undefined || types.length === 0 ? '' : `AND type IN (${w.list(types)})`;
  const staleGuard = spec.staleOnly === true ? "AND failure_class = 'lease_expired'" : '';
  return `UPDATE ${hint}${tableText(t, 'items')} FORCE INDEX (PRIMARY) SET ${leaseAssignmentsText(w, lease)}
    WHERE id IN (${w.ids(ids)}) AND queue = ${w.value(spec.queue)} AND state = 'pending' AND is_head = 1
      AND run_after <= NOW(6) ${epochGuard} ${typeGuard} ${staleGuard}`;
}

/**
 * Where and how a claim's CAS goes. On TiDB an autocommit CAS that loses to
 * a concurrent claim at COMMIT must come back as a write conflict (9007)
 * instead of being run again by TiDB, which would run it as a pessimistic
 * statement that waits on the rows' locks. Such a wait is on the locks of
 * other claims' commits in flight, and while those wait on it, TiDB's
 * deadlock detector sees no cycle: the claims stalled until the 50 s
 * lock-wait timeout (docs/design.md, "TiDB: what differs"). The ledger then
 * claims again, from a fresh candidate read, and nothing waits.
 *
 * Through the ledger's own pool the CAS goes prepared, for TiDB's plan
 * cache, on the connections set to return the conflict
 * (`conflictsReturned`). Through a pool handed in it goes as text with a
 * SET_VAR hint, which holds for its statement alone (TiDB warns that it has
 * not verified this variable for hints, and applies it) but keeps TiDB from
 * caching its plan. Inside a transaction the transaction's own retry rules
 * apply.
 */
function casWay(
  exec: Executor,
  caps: LedgerCapabilities,
  inTransaction: boolean,
  idCount: number,
  typeCount: number,
): { exec: Executor; prepared: boolean; hint: string } {
  const prepared = bindable(caps, idCount, typeCount);
  if (caps.family !== 'tidb' || inTransaction) return { exec, prepared, hint: '' };
  if (prepared && caps.conflictsReturned !== undefined) return { exec: caps.conflictsReturned, prepared, hint: '' };
  return { exec, prepared: false, hint: '/*+ SET_VAR(tidb_retry_limit=0) */ ' };
}

/**
 * Takes `limit` candidates in priority order. The first half (at least one)
 * is the earliest due, always: an item reclaimed from a dead holder, or
 * handed back unstarted, kept its due time and so is among them, and the
 * next claim round of any consumer takes it, however deep the backlog
 * behind it (docs/design.md §3, "Keeping its place"). The rest is picked at
 * random from a window of the earliest due after those (within the
 * priority group that straddles the cut), so concurrent claimers reading
 * the same candidates collide on half their claim at most.
 */
export function pick(rows: readonly Candidate[], limit: number): string[] {
  const sorted = inDueOrder(rows);
  const first = Math.min(sorted.length, Math.ceil(limit / 2));
  const out = sorted.slice(0, first).map((r) => r.id);
  let i = first;
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

/** Candidates by priority, then due time. */
function inDueOrder(rows: readonly Candidate[]): Candidate[] {
  return [...rows].sort((a, b) => a.priority - b.priority || Number(a.due_us) - Number(b.due_us));
}
