import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { HeldItem, LeaseHandle, RenewOutcome } from '../../types.js';
import { OwnershipLostError } from '../../../errors.js';
import { andEpochIsCurrent, fenceOf, refusal } from '../fleet/ownership.js';
import type { LedgerCapabilities } from '../../capabilities.js';
import { affected, list, nowPlusMs } from '../common/fragments.js';

/**
 * Extends many leases from the ledger's now: one UPDATE by primary key (a
 * consumer's renewals of one clock tick), then a read of the rows, in one
 * round trip where the connection takes several statements. A lease is
 * renewed when its row is still processing under its token afterwards:
 * tokens are each holder's own, so the UPDATE's `lease_token IN (…)` can only
 * match a row that one of these leases holds. A renewal also reports a
 * cancel an operator requested, so the handler can stop.
 */
export async function renewLeases(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  handles: readonly Pick<LeaseHandle, 'id' | 'leaseToken' | 'group'>[],
  leaseMs: number,
): Promise<RenewOutcome[]> {
  if (handles.length === 0) return [];
  const ids = list([...new Set(handles.map((h) => h.id))]);
  // A coalesced group's members are held with their head, under its token.
  const held = handles.some((h) => h.group !== undefined)
    ? list([...new Set(handles.flatMap((h) => [h.id, ...(h.group?.ids ?? [])]))])
    : ids;
  const update = sql`UPDATE ${t.items} SET lease_until = ${nowPlusMs(leaseMs)}
    WHERE id IN (${held}) AND lease_token IN (${list([
      ...new Set(handles.map((h) => h.leaseToken)),
    ])}) AND state = 'processing'`;
  const read = sql`SELECT id, lease_token, state, cancel_requested FROM ${t.items} WHERE id IN (${ids})`;
  let rows: LeaseRow[];
  if (caps.multiStatement) {
    const both = await sql`${update}; ${read}`.execute(db);
    rows = (both.rows as unknown as [unknown, LeaseRow[]])[1];
  } else {
    await update.execute(db);
    rows = (await read.$castTo<LeaseRow>().execute(db)).rows;
  }
  const byId = new Map(rows.map((r) => [r.id, r]));
  return handles.map((h) => {
    const row = byId.get(h.id);
    const renewed = row !== undefined && row.state === 'processing' && row.lease_token === h.leaseToken;
    return { renewed, cancelRequested: renewed && Number(row.cancel_requested) === 1 };
  });
}

interface LeaseRow {
  id: string;
  lease_token: string;
  state: string;
  cancel_requested: number | string;
}

/** False when the lease is no longer held; OwnershipLostError (nothing written) when its ownership epoch moved on. */
export async function saveCheckpoint(
  db: LedgerDb,
  t: LedgerTables,
  h: HeldItem,
  checkpointJson: string,
): Promise<boolean> {
  const r = await sql`UPDATE ${t.items} SET checkpoint = ${checkpointJson}, updated_at = NOW(6)
    WHERE id = ${h.id} AND lease_token = ${h.leaseToken} AND state = 'processing'${andEpochIsCurrent(t, h)}`.execute(
    db,
  );
  if (affected(r) === 1) return true;
  const refused = await refusal(db, t, fenceOf(h), h.id);
  if (refused instanceof OwnershipLostError) throw refused;
  return false;
}

/**
 * Stores the latest progress report of many held items in one UPDATE (a
 * consumer's reports of one clock tick), each fenced by its own token: a
 * row matched by id whose token is not the report's keeps its progress.
 */
export async function saveProgress(
  db: LedgerDb,
  t: LedgerTables,
  reports: readonly (HeldItem & { json: string })[],
): Promise<void> {
  if (reports.length === 0) return;
  // A report of a lease claimed under an ownership epoch is kept only while that epoch is the queue's.
  const cases = sql.join(
    reports.map(
      (r) => sql`WHEN id = ${r.id} AND lease_token = ${r.leaseToken}${andEpochIsCurrent(t, r)} THEN ${r.json}`,
    ),
    sql` `,
  );
  await sql`UPDATE ${t.items} SET progress = CASE ${cases} ELSE progress END
    WHERE id IN (${list(reports.map((r) => r.id))}) AND state = 'processing'`.execute(db);
}
