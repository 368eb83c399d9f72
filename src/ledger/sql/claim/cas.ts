import { sql } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { Executor } from '../../connection.js';
import { newLeaseToken } from '../../ids.js';
import { isConnectionError, readAfterLostConnection } from '../../retry.js';
import type { ClaimedRow } from '../../rows.js';
import { tableText, type LedgerTables } from '../../tables.js';
import type { ClaimedItem } from '../../types.js';
import { bindable, statementFor, type ValueWriter } from '../common/bound.js';
import {
  claimedItems,
  grantLease,
  leaseAssignmentsText,
  readBackClaimed,
  readBackClaimedText,
  type Lease,
} from './claimed.js';
import { joinGroups, type CoalesceSpec } from './coalesce.js';
import { affected } from '../common/fragments.js';

export interface ClaimSpec {
  queue: string;
  owner: string;
  leaseMs: number;
  /** Claims are fenced by this ownership epoch when given (docs/design/supervisor.md). */
  epoch?: number | undefined;
  /**
   * Heads of these types take their lane's next pending items of their type with them
   * (docs/design/batches-and-steps.md, Coalescing).
   */
  coalesce?: CoalesceSpec | undefined;
  /**
   * The queue's fleet cap: the claim takes no more than leaves this many processing
   * (docs/design/consumer.md, "The fleet cap").
   */
  maxProcessing?: number | undefined;
  /** Only rescued work: pending heads whose last lease expired (docs/design/consumer.md, "Stale-only claims"). */
  staleOnly?: boolean | undefined;
}

/**
 * The heads' groups, for a consumer that coalesces some types; after the CAS, so a conflict there never
 * runs the CAS again. Under a fleet cap the members count too: together they take at most `budget`.
 */
export function withGroups(
  exec: Executor,
  t: LedgerTables,
  heads: ClaimedItem[],
  spec: ClaimSpec,
  opts: { budget?: number; inTransaction?: boolean } = {},
): Promise<ClaimedItem[]> | ClaimedItem[] {
  return spec.coalesce === undefined || heads.length === 0 ? heads : joinGroups(exec, t, heads, spec.coalesce, opts);
}

interface CasOptions {
  /** Only items of these types (a claim by ids of a consumer that claims only some). */
  types?: readonly string[] | undefined;
  /** The lease token to grant; a fresh one when absent. */
  token?: string;
  /** Run inside the caller's transaction: a lost connection there rolled it back, and the caller runs it again. */
  inTransaction?: boolean;
}

export async function casClaim(
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
export function casText(
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
      : `AND EXISTS (SELECT 1 FROM ${tableText(t, 'ownership')} o WHERE o.queue = ${w.value(
          spec.queue,
        )} AND o.epoch = ${w.value(spec.epoch)})`;
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
 * lock-wait timeout (docs/design/ledger-sql.md, "TiDB: what differs"). The ledger then
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
