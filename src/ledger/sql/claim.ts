import { sql, type RawBuilder } from 'kysely';
import { newLeaseToken } from '../ids.js';
import { toWorkItem, type ItemRow } from '../rows.js';
import type { LedgerTables } from '../tables.js';
import type { ClaimedItem, QueueClass } from '../types.js';
import { QUEUE_CLASSES } from '../types.js';
import { affected, inline, ITEM_COLUMNS, list, nowPlusMs, ownerColumn, type Executor } from './common.js';

export interface ClaimSpec {
  queue: string;
  owner: string;
  leaseMs: number;
  /**
   * The connection accepts several statements per query: send the CAS and the
   * read-back together, one round trip instead of two.
   */
  multiStatement?: boolean | undefined;
  /** Claims are fenced by this ownership epoch when given (DESIGN §7). */
  epoch?: number | undefined;
}

export interface ClaimHeadsSpec extends ClaimSpec {
  limit: number;
  classes?: readonly QueueClass[] | undefined;
  types?: readonly string[] | undefined;
}

export interface ClaimOutcome {
  items: ClaimedItem[];
  /** More claimable heads were seen than this claim took: worth waking another consumer. */
  moreAvailable: boolean;
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

/**
 * What every claim writes (here, and for lane successors claimed with a
 * completion): processing under a fresh lease, one more attempt.
 */
export function leaseAssignments(lease: { token: string; owner: string; leaseMs: number; epoch?: number | undefined }): RawBuilder<unknown> {
  return sql`state = 'processing', lease_token = ${inline(lease.token)}, lease_owner = ${inline(ownerColumn(lease.owner))},
    lease_until = ${nowPlusMs(lease.leaseMs)}, attempt = attempt + 1, epoch = ${inline(lease.epoch ?? null)},
    cancel_requested = 0, started_at = NOW(6), updated_at = NOW(6)`;
}

/** The rows of `ids` a claim under `token` won. */
export function readBackClaimed(t: LedgerTables, ids: readonly string[], token: string): RawBuilder<unknown> {
  return sql`SELECT ${ITEM_COLUMNS} FROM ${t.items} WHERE id IN (${list(ids)}) AND lease_token = ${inline(token)} AND state = 'processing'`;
}

/** Claims exactly these ids if each is still a due pending head (targeted wake-ups). */
export async function claimByIds(exec: Executor, t: LedgerTables, spec: ClaimSpec & { ids: readonly string[] }): Promise<ClaimedItem[]> {
  if (spec.ids.length === 0) return [];
  return casClaim(exec, t, spec, spec.ids);
}

async function casClaim(exec: Executor, t: LedgerTables, spec: ClaimSpec, ids: readonly string[]): Promise<ClaimedItem[]> {
  const token = newLeaseToken();
  const epochGuard: RawBuilder<unknown> =
    spec.epoch === undefined
      ? sql``
      : sql`AND EXISTS (SELECT 1 FROM ${t.ownership} o WHERE o.queue = ${inline(spec.queue)} AND o.epoch = ${inline(spec.epoch)})`;
  const cas = sql`UPDATE ${t.items} SET ${leaseAssignments({ token, owner: spec.owner, leaseMs: spec.leaseMs, epoch: spec.epoch })}
    WHERE id IN (${list(ids)}) AND queue = ${inline(spec.queue)} AND state = 'pending' AND is_head = 1
      AND run_after <= NOW(6) ${epochGuard}`;
  const readBack = readBackClaimed(t, ids, token);
  let rows: ItemRow[];
  if (spec.multiStatement) {
    // Both statements in one query: mysql2 answers with one result per statement.
    const both = await sql`${cas}; ${readBack}`.execute(exec);
    const [, selected] = both.rows as unknown as [unknown, ItemRow[]];
    rows = selected;
  } else {
    if (affected(await cas.execute(exec)) === 0) return [];
    rows = (await readBack.$castTo<ItemRow>().execute(exec)).rows;
  }
  return rows.map((r) => toWorkItem(r) as ClaimedItem);
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
