import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import type { LeaseHandle, RenewOutcome } from '../types.js';
import { affected, nowPlusMs } from './common.js';

/** Extends the lease from the ledger's now. One statement unless a cancel was requested. */
export async function renewLease(db: LedgerDb, t: LedgerTables, h: Pick<LeaseHandle, 'id' | 'leaseToken'>, leaseMs: number): Promise<RenewOutcome> {
  const first = await sql`UPDATE ${t.items} SET lease_until = ${nowPlusMs(leaseMs)}
    WHERE id = ${h.id} AND lease_token = ${h.leaseToken} AND state = 'processing' AND cancel_requested = 0`.execute(db);
  if (affected(first) === 1) return { renewed: true, cancelRequested: false };
  const second = await sql`UPDATE ${t.items} SET lease_until = ${nowPlusMs(leaseMs)}
    WHERE id = ${h.id} AND lease_token = ${h.leaseToken} AND state = 'processing'`.execute(db);
  const renewed = affected(second) === 1;
  return { renewed, cancelRequested: renewed };
}

export async function saveCheckpoint(db: LedgerDb, t: LedgerTables, h: Pick<LeaseHandle, 'id' | 'leaseToken'>, checkpointJson: string): Promise<boolean> {
  const r = await sql`UPDATE ${t.items} SET checkpoint = ${checkpointJson}, updated_at = NOW(6)
    WHERE id = ${h.id} AND lease_token = ${h.leaseToken} AND state = 'processing'`.execute(db);
  return affected(r) === 1;
}
