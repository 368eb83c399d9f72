import { sql, type RawBuilder } from 'kysely';
import type { LedgerTables } from '../tables.js';
import type { LeaseHandle } from '../types.js';
import { inline, jsonLiteral, list, NO_TIME } from './common.js';

export interface CompletionEntry {
  handle: LeaseHandle;
  resultJson: string | null;
}

/**
 * The completion CAS of many items in one UPDATE: each row changes only if it
 * is still processing under the entry's lease token. `endedAt` is the SQL
 * for the terminal time (NOW(6) unless a caller needs to find its own rows
 * again by it).
 */
export function completionStatement(t: LedgerTables, entries: readonly CompletionEntry[], endedAt: RawBuilder<unknown> = sql`NOW(6)`): RawBuilder<unknown> {
  const ids = entries.map((e) => e.handle.id);
  const withResult = entries.filter((e): e is CompletionEntry & { resultJson: string } => e.resultJson !== null);
  const resultExpr =
    withResult.length === 0
      ? sql`NULL`
      : sql`CASE id ${sql.join(withResult.map((e) => sql`WHEN ${inline(e.handle.id)} THEN ${sql.raw(jsonLiteral(e.resultJson))}`), sql` `)} ELSE NULL END`;
  // Items of one claim share its token: then a plain equality does, which
  // MariaDB plans far more cheaply than a list of (id, token) pairs.
  const tokens = new Set(entries.map((e) => e.handle.leaseToken));
  const [onlyToken] = tokens;
  const tokenGuard =
    tokens.size === 1
      ? sql`lease_token = ${inline(onlyToken ?? null)}`
      : sql`(id, lease_token) IN (${sql.join(entries.map((e) => sql`(${inline(e.handle.id)}, ${inline(e.handle.leaseToken)})`))})`;
  return sql`UPDATE ${t.items}
    SET state = 'completed', result = ${resultExpr}, last_error = NULL, failure_class = NULL, lease_until = ${NO_TIME},
      terminal_at = ${endedAt}, updated_at = ${endedAt}
    WHERE id IN (${list(ids)}) AND state = 'processing' AND ${tokenGuard}`;
}
