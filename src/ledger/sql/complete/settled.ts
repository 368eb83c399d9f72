import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { LeaseHandle } from '../../types.js';
import { list } from '../common/fragments.js';

/** What the ledger says of a completion whose answer was lost: done by this holder, still to do, or lost to another. */
export type CompletionSettled = 'completed' | 'open' | 'lost';

interface CompletionRow {
  settled: CompletionSettled;
  /** terminal_at as text (a Date would drop its microseconds), when completed. */
  ended: string | null;
}

/**
 * Per handle, whether this holder's completion took effect. A completed item
 * keeps the lease token that completed it; only that token's holder can
 * complete it. The read locks the rows, so it waits for a lost session's
 * transaction that wrote them to end.
 */
export async function completionRows(
  exec: Executor,
  t: LedgerTables,
  handles: readonly Pick<LeaseHandle, 'id' | 'leaseToken'>[],
): Promise<CompletionRow[]> {
  if (handles.length === 0) return [];
  const r = await sql<{
    id: string;
    state: string;
    lease_token: string;
    ended: string | null;
  }>`SELECT id, state, lease_token,
      DATE_FORMAT(terminal_at, '%Y-%m-%d %H:%i:%s.%f') AS ended
    FROM ${t.items} WHERE id IN (${list(handles.map((h) => h.id))}) FOR UPDATE`.execute(exec);
  const byId = new Map(r.rows.map((row) => [row.id, row]));
  return handles.map((h) => {
    const row = byId.get(h.id);
    if (row === undefined || row.lease_token !== h.leaseToken) return { settled: 'lost', ended: null };
    if (row.state === 'completed') return { settled: 'completed', ended: row.ended };
    return { settled: row.state === 'processing' ? 'open' : 'lost', ended: null };
  });
}

/** Per handle, whether this holder's completion took effect (see completionRows). */
export async function completionsSettled(
  exec: Executor,
  t: LedgerTables,
  handles: readonly Pick<LeaseHandle, 'id' | 'leaseToken'>[],
): Promise<CompletionSettled[]> {
  return (await completionRows(exec, t, handles)).map((r) => r.settled);
}
