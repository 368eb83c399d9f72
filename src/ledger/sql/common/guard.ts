import { sql, type RawBuilder } from 'kysely';
import { errno } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import { inline } from './fragments.js';

// Guards of the paths that send their last writes and their COMMIT in one
// round trip (docs/design/ledger-sql.md, "Round trips"): what the writes count on is
// checked in SQL among them. When it does not hold, the guard raises, the
// transaction rolls back, and the caller runs the path that decides step by
// step instead.

/** What a guard raises: "Subquery returns more than 1 row". */
const GUARD_ERRNO = 1242;

/** A guard refused the transaction: the general path is for it. */
export function isGuardRefusal(error: unknown): boolean {
  return errno(error) === GUARD_ERRNO;
}

/**
 * A statement that raises GUARD_ERRNO unless `holds`: the migrations table
 * has a row per applied schema version, so at least two on any ledger this
 * code runs on, and a scalar subquery of two rows fails.
 */
export function refuseUnless(t: LedgerTables, holds: RawBuilder<unknown>): RawBuilder<unknown> {
  return refuseIf(t, sql`NOT (${holds})`);
}

/**
 * A statement that raises GUARD_ERRNO if `fails`. Where the condition is an
 * EXISTS, this is the cheaper form: TiDB plans `NOT (NOT EXISTS …)` as an
 * anti-join, several times the work.
 */
export function refuseIf(t: LedgerTables, fails: RawBuilder<unknown>): RawBuilder<unknown> {
  return sql`SET @lw_guard = (SELECT 1 FROM ${t.migrations} WHERE ${fails})`;
}

/** A guard that the statement sent just before it changed `n` rows (a CAS of `n` items that all won). */
export function refuseUnlessChanged(t: LedgerTables, n: number): RawBuilder<unknown> {
  return refuseUnless(t, sql`ROW_COUNT() = ${inline(n)}`);
}
