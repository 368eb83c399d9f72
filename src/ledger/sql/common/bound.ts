import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import { PREPARED_MARK } from '../../connection.js';
import { jsonLiteral, literal } from './fragments.js';

/** A value a statement carries: inlined as a literal (`literal`), or bound to a `?`. */
export type StatementValue = string | number | null;

/**
 * Writes a statement's values into its text. The inline writer writes each
 * value into the text (`literal`), as the ledger sends its statements by
 * default: as text, several per round trip. The bound writer leaves a
 * marker in its place and keeps the value, for a statement sent prepared
 * (`statementFor`); it pads every list to one of a few lengths, so a
 * statement has a few texts, not one per list length, and a server that
 * caches plans per prepared text plans each once.
 */
export interface ValueWriter {
  value(v: StatementValue): string;
  /** A JSON text: inlined by `jsonLiteral`, which does no per-character work on most documents. */
  json(text: string): string;
  /** Each row rendered (its values through this writer), joined by `separator`; never empty. */
  each<T>(rows: readonly T[], render: (row: T) => string, separator: string): string;
  /** A comma list, for `IN (…)`; never empty. */
  list(vs: readonly StatementValue[]): string;
  /**
   * A comma list of item ids, for `id IN (…)`; never empty. Bound, it is
   * padded with values no id can be (`.1`, `.2`, …; ids are 22 chars of
   * [A-Za-z0-9_-]), not by repeating an id: TiDB serves a cached plan for a
   * primary-key `IN` list only when no value in it repeats
   * (`tidb_opt_fix_control` 44830, connection.ts).
   */
  ids(vs: readonly string[]): string;
  /** A comma list of parenthesised tuples, for `(a, b) IN (…)`; never empty. */
  tuples(rows: readonly (readonly StatementValue[])[]): string;
}

function writer(value: (v: StatementValue) => string, json: (text: string) => string, pads: boolean): ValueWriter {
  const pad = <T>(rows: readonly T[], filler: (i: number) => T): readonly T[] =>
    !pads
      ? rows
      : Array.from({ length: paddedLength(rows.length) }, (_, i) => (i < rows.length ? rows[i]! : filler(i)));
  const each = <T>(rows: readonly T[], render: (row: T) => string, separator: string): string =>
    pad(rows, () => rows[rows.length - 1]!)
      .map(render)
      .join(separator);
  return {
    value,
    json,
    each,
    list: (vs) => each(vs, value, ', '),
    ids: (vs) =>
      pad(vs, (i) => `.${i}`)
        .map(value)
        .join(', '),
    tuples: (rows) => each(rows, (r) => `(${r.map(value).join(', ')})`, ', '),
  };
}

export const INLINE: ValueWriter = writer(literal, jsonLiteral, false);

/**
 * The lengths lists are padded to, repeating their last row (a repeated
 * value in an `IN` list or a `CASE` changes nothing; id lists: `ids`). TiDB caches no plan
 * for a statement with more than 200 values in its `IN` lists: a statement
 * with a longer list than the last length is sent inline (`bindable`).
 */
const LIST_LENGTHS = [1, 2, 4, 8, 16, 32, 64] as const;
const MAX_BOUND_LIST = LIST_LENGTHS[LIST_LENGTHS.length - 1]!;

/** Whether a statement with lists of these lengths is worth sending prepared on `caps`' server. */
export function bindable(caps: LedgerCapabilities, ...lengths: number[]): boolean {
  return caps.prepared && lengths.every((n) => n <= MAX_BOUND_LIST);
}

function paddedLength(n: number): number {
  return LIST_LENGTHS.find((l) => l >= n) ?? n;
}

/** Where a bound value sits in a statement's text until `statementFor` turns it into a parameter. */
const MARK = /\u0001(\d+)\u0001/;

function boundWriter(): ValueWriter & { values: StatementValue[] } {
  const values: StatementValue[] = [];
  const bind = (v: StatementValue): string => `\u0001${values.push(v) - 1}\u0001`;
  return { ...writer(bind, bind, true), values };
}

/**
 * A statement written once for both ways of sending it: `write` builds its
 * text with the writer it is given. With `prepared`, the values go as
 * parameters of a statement that starts with PREPARED_MARK, which the pool
 * prepares (each connection once per text) and TiDB's plan cache serves: a
 * statement sent as text with its values inlined is parsed and planned anew
 * every time, and that planning was the largest part of tidb-server's CPU
 * per job (docs/design/ledger-sql.md, "TiDB: what differs"). Otherwise the values are
 * written into the text as literals.
 */
export function statementFor(prepared: boolean, write: (w: ValueWriter) => string): RawBuilder<unknown> {
  if (!prepared) return sql.raw(write(INLINE));
  const w = boundWriter();
  const parts = write(w).split(MARK);
  return markedPrepared(
    true,
    sql.join(
      parts.map((part, i) => (i % 2 === 0 ? sql.raw(part) : sql.val(w.values[Number(part)] ?? null))),
      sql.raw(''),
    ),
  );
}

/**
 * `statement` (its values parameters) marked, when `prepared`, for the pool to send prepared (PREPARED_MARK,
 * connection.ts).
 */
export function markedPrepared(prepared: boolean, statement: RawBuilder<unknown>): RawBuilder<unknown> {
  return prepared ? sql`${sql.raw(PREPARED_MARK)}${statement}` : statement;
}
