import type { RawBuilder } from 'kysely';
import { tableText, type LedgerTables } from '../../tables.js';
import type { LeaseHandle } from '../../types.js';
import { statementFor, type ValueWriter } from '../common/bound.js';
import { NO_TIME_TEXT } from '../common/fragments.js';
import { groupBy } from '../../../group-by.js';
import { epochIsCurrentText, fenceOf } from '../fleet/ownership.js';

export interface CompletionEntry {
  handle: LeaseHandle;
  resultJson: string | null;
}

/**
 * The completion CAS of many items in one UPDATE: each row changes only if it
 * is still processing under the entry's lease token. `prepared` when it is
 * sent on its own (sql/common/bound.ts).
 */
export function completionStatement(
  t: LedgerTables,
  entries: readonly CompletionEntry[],
  prepared = false,
): RawBuilder<unknown> {
  return statementFor(prepared, (w) => completionText(w, t, entries));
}

function completionText(w: ValueWriter, t: LedgerTables, entries: readonly CompletionEntry[]): string {
  const withResult = entries.filter((e): e is CompletionEntry & { resultJson: string } => e.resultJson !== null);
  const resultExpr =
    withResult.length === 0
      ? 'NULL'
      : `CASE id ${w.each(
          withResult,
          (e) => `WHEN ${w.value(e.handle.id)} THEN ${w.json(e.resultJson)}`,
          ' ',
        )} ELSE NULL END`;
  // Items of one claim share its token: then a plain equality does, which
  // MariaDB plans far more cheaply than a list of (id, token) pairs.
  const tokens = new Set(entries.map((e) => e.handle.leaseToken));
  const [onlyToken] = tokens;
  const tokenGuard =
    tokens.size === 1
      ? `lease_token = ${w.value(onlyToken ?? null)}`
      : `(id, lease_token) IN (${w.tuples(entries.map((e) => [e.handle.id, e.handle.leaseToken]))})`;
  return `UPDATE ${tableText(t, 'items')}
    SET state = 'completed', result = ${resultExpr}, last_error = NULL, failure_class = NULL, lease_until = ${
      NO_TIME_TEXT
    },
      terminal_at = NOW(6), updated_at = NOW(6)
    WHERE id IN (${w.ids(entries.map((e) => e.handle.id))}) AND state = 'processing' AND ${tokenGuard}${epochGuard(
      w,
      t,
      entries,
    )}`;
}

/**
 * For entries claimed under an ownership epoch, that their epoch is still
 * their queue's; nothing when none was (a queue without ownership pays
 * nothing). The entries of one batch are nearly always of one queue and
 * epoch: then one EXISTS covers them all.
 */
function epochGuard(w: ValueWriter, t: LedgerTables, entries: readonly CompletionEntry[]): string {
  if (!entries.some((e) => e.handle.epoch !== null && e.handle.epoch !== undefined)) return '';
  const fenced = groupBy(
    entries.flatMap((e) => {
      const f = fenceOf(e.handle);
      return f === undefined ? [] : [{ id: e.handle.id, f }];
    }),
    (e) => `${e.f.epoch} ${e.f.queue}`,
  );
  const groups = [...fenced.values()];
  const only = groups.length === 1 && groups[0]!.length === entries.length ? groups[0]![0] : undefined;
  if (only !== undefined) return ` AND ${epochIsCurrentText(w, t, only.f)}`;
  const unfenced = entries.filter((e) => fenceOf(e.handle) === undefined).map((e) => e.handle.id);
  const each = groups.map((g) => `(id IN (${w.ids(g.map((e) => e.id))}) AND ${epochIsCurrentText(w, t, g[0]!.f)})`);
  return ` AND (${[...(unfenced.length > 0 ? [`id IN (${w.ids(unfenced)})`] : []), ...each].join(' OR ')})`;
}
