import { sql, type RawBuilder } from 'kysely';
import type { LedgerTables } from '../../tables.js';
import type { SuccessorClaim } from '../../types.js';
import { leaseAssignments, successorFilter, type Lease } from '../claim/claimed.js';
import { groupBy } from '../../../group-by.js';
import { inline, list, literal, queueScoped } from '../common/fragments.js';
import { keyIn, type KeyCount } from './key-counts.js';
import type { StatementResult } from '../common/pipeline.js';

export interface WaitRow {
  queue: string;
  ckey: string;
  at: string;
  seq: number;
  id: string;
}

/** Waiting items by their key (queue-scoped), each key's in the order read. */
export function byLine(rows: readonly WaitRow[]): Map<string, WaitRow[]> {
  return groupBy(rows, (r) => queueScoped(r.queue, r.ckey));
}

export function byPlace(a: WaitRow, b: WaitRow): number {
  return a.at < b.at ? -1 : a.at > b.at ? 1 : Number(a.seq) - Number(b.seq) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** Admitted and claimed at once under the completing consumer's lease, if due and of the classes and types it takes. */
export function claimAdmitted(
  t: LedgerTables,
  ids: readonly string[],
  lease: Lease,
  next: SuccessorClaim,
): RawBuilder<unknown> {
  return sql`UPDATE ${t.items} SET is_head = 1, ${leaseAssignments(lease)}
    WHERE id IN (${list(ids)}) AND state = 'pending' AND is_head = 0 AND run_after <= NOW(6)${successorFilter(next)}`;
}

/**
 * Which of `ids` this hand-on admitted: heads now, left pending or claimed for the completing consumer (one cancelled
 * meanwhile is neither).
 */
export function admittedOf(t: LedgerTables, ids: readonly string[]): RawBuilder<unknown> {
  return sql`SELECT id FROM ${t.items} WHERE id IN (${list(
    ids,
  )}) AND is_head = 1 AND state IN ('pending', 'processing')`;
}

/** Keys that take at most this many waiting items are read by place (readWaiting). */
const BY_PLACE = 4;
const PLACE_SEPARATOR = '|';

/**
 * Each key's earliest-due waiting items, up to `take`; waitRows reads the
 * answers. The keys that take at most BY_PLACE (the usual batch: one each)
 * are one statement: per key row, its line's first places, each an ordered
 * lookup of one row on key_waits' primary key, answered as `place0`,
 * `place1`, … (run after, seq and id in one string). One query per key,
 * which the server plans apart, cost several times more. A key that takes
 * more reads its ordered range in a query of its own.
 */
export function readWaiting(t: LedgerTables, wants: readonly { k: KeyCount; take: number }[]): RawBuilder<unknown>[] {
  const statements: RawBuilder<unknown>[] = [];
  const byTake = groupBy(
    wants.filter((x) => x.take <= BY_PLACE),
    (w) => w.take,
  );
  if (byTake.size > 0) {
    const place = (n: number): RawBuilder<unknown> =>
      sql`(SELECT CONCAT(DATE_FORMAT(w.run_after, '%Y-%m-%d %H:%i:%s.%f'), ${inline(PLACE_SEPARATOR)}, w.seq, ${inline(
        PLACE_SEPARATOR,
      )}, w.id) FROM ${t.keyWaits} w
        WHERE w.queue = k.queue AND w.ckey = k.ckey ORDER BY w.run_after, w.seq, w.id LIMIT 1 OFFSET ${inline(n)})`;
    const parts = [...byTake].map(([take, ws]) => {
      const keys = ws.map((w) => w.k);
      const places = Array.from({ length: BY_PLACE }, (_, n) =>
        n < take ? sql`${place(n)} AS place${sql.raw(String(n))}` : sql`NULL AS place${sql.raw(String(n))}`,
      );
      return sql`SELECT k.queue, k.ckey, ${sql.join(places)} FROM ${t.keys} k WHERE (k.queue, k.ckey) IN (${keyIn(
        keys,
      )})`;
    });
    statements.push(sql.join(parts, sql` UNION ALL `));
  }
  const many = wants.filter((x) => x.take > BY_PLACE);
  if (many.length > 0) {
    const parts = many.map(
      (w) => sql`(SELECT queue, ckey, DATE_FORMAT(run_after, '%Y-%m-%d %H:%i:%s.%f') AS at, seq, id FROM ${t.keyWaits}
        WHERE queue = ${inline(w.k.queue)} AND ckey = ${inline(w.k.key)} ORDER BY run_after, seq, id LIMIT ${inline(
          w.take,
        )})`,
    );
    statements.push(sql.join(parts, sql` UNION ALL `));
  }
  return statements;
}

/** The waiting items readWaiting's statements found, each key's in the order slots go to them. */
export function waitRows(results: readonly StatementResult[]): WaitRow[] {
  const rows: WaitRow[] = [];
  for (const r of results.flatMap((x) => x.rows)) {
    if (!('place0' in r)) {
      rows.push(r as unknown as WaitRow);
      continue;
    }
    for (let n = 0; n < BY_PLACE; n++) {
      const place = r[`place${n}`];
      if (place === null || place === undefined) break;
      const [at, seq, id] = String(place).split(PLACE_SEPARATOR);
      rows.push({ queue: String(r.queue), ckey: String(r.ckey), at: at!, seq: Number(seq), id: id! });
    }
  }
  return rows;
}

/** The waiting items become heads (one cancelled meanwhile does not). */
export function admitWaiting(t: LedgerTables, ids: readonly string[]): RawBuilder<unknown> {
  return sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6) WHERE id IN (${list(
    ids,
  )}) AND state = 'pending' AND is_head = 0`;
}

/** The items read from their keys' lines leave them, admitted or passed over. */
export function leaveLine(t: LedgerTables, waiting: readonly WaitRow[]): RawBuilder<unknown> {
  const places = waiting
    .map(
      (w) => `(${literal(w.queue)}, ${literal(w.ckey)}, ${literal(w.at)}, ${literal(Number(w.seq))}, ${literal(w.id)})`,
    )
    .join(', ');
  return sql`DELETE FROM ${t.keyWaits} WHERE (queue, ckey, run_after, seq, id) IN (${sql.raw(places)})`;
}
