import { sql, type RawBuilder } from 'kysely';
import { escape as escapeValue } from 'mysql2';

/**
 * Comma list of values, for `IN (…)`: each written once here as a literal
 * (`literal`). A claim or a completion names up to a thousand ids, and a
 * parameter per id cost a node per id in Kysely and a placeholder scan per
 * id in mysql2.
 */
export function list(values: readonly (string | number)[]): RawBuilder<unknown> {
  return sql.raw(values.map((v) => literal(v)).join(', '));
}

/**
 * A value inlined into a statement as a literal (see `literal`). Hot
 * statements whose values are all inlined carry no parameters, so the pool
 * sends them without scanning their text for placeholders.
 */
export function inline(value: string | number | null): RawBuilder<unknown> {
  return sql.raw(literal(value));
}

/**
 * One string, number or NULL as SQL text that means the same in every
 * sql_mode. A backslash escape means one thing to a session without
 * NO_BACKSLASH_ESCAPES and another to one with it, and the ledger runs on
 * connections it does not set up (a caller's transaction, a Kysely handed
 * in): there a backslash-escaped quote would end the literal. So no
 * backslash is ever written: a quote is doubled, which every mode reads
 * alike, and text holding a backslash goes as hex (`hexText`), as does
 * text holding NUL or Ctrl-Z, which a client or a log may cut at. Not for
 * Dates (their text depends on the pool's time zone).
 */
export function literal(value: string | number | null): string {
  if (typeof value === 'string') return textLiteral(value);
  return escapeValue(value);
}

/** Text as `literal` writes it: `'…'` with quotes doubled, or hex when it holds a backslash, NUL or Ctrl-Z. */
export function textLiteral(text: string): string {
  if (NEEDS_HEX.test(text)) return hexText(text);
  return text.includes("'") ? `'${text.replace(QUOTES, "''")}'` : `'${text}'`;
}
const NEEDS_HEX = /[\\\x00\x1a]/;
const QUOTES = /'/g;

/**
 * Text as a hex literal of its UTF-8 bytes, read as utf8mb4 text in the
 * collation of the ledger's text columns. A bare `X'…'` is a binary string:
 * it would turn a derived table's column binary, and a JSON column refuses
 * it. The explicit collation matches the text columns (lanes, keys, JSON),
 * so comparisons with them still use their indexes; ASCII columns (queue,
 * type, ids) only ever see validated text, which never needs hex.
 */
export function hexText(text: string): string {
  return `_utf8mb4 X'${Buffer.from(text, 'utf8').toString('hex')}' COLLATE utf8mb4_bin`;
}

/**
 * A JSON text as a literal: `literal`'s rule, on the hot path of every
 * enqueue and completion. JSON.stringify writes no raw control character,
 * so only a backslash (an escape inside a JSON string) sends it as hex:
 * most payloads go as they are, with no per-character work.
 */
export function jsonLiteral(text: string): string {
  return textLiteral(text);
}

/**
 * `(queue, lane) IN ((…), …)` for a list of lanes. A single pair is written
 * as two equalities: MariaDB plans a one-pair row-constructor IN as a range
 * in a SELECT, but as a full index scan in an UPDATE or DELETE (every lane
 * row read, and latched, per completion of a laned item).
 */
export function laneIn(lanes: readonly { queue: string; lane: string | null }[]): RawBuilder<unknown> {
  const [only] = lanes;
  if (lanes.length === 1 && only) return sql.raw(`(queue = ${literal(only.queue)} AND lane = ${literal(only.lane)})`);
  return sql.raw(`(queue, lane) IN (${lanes.map((l) => `(${literal(l.queue)}, ${literal(l.lane)})`).join(', ')})`);
}

/** `NOW(6) + INTERVAL ms` on the ledger's clock. */
export function nowPlusMs(ms: number): RawBuilder<unknown> {
  return sql.raw(nowPlusMsText(ms));
}

export function nowPlusMsText(ms: number): string {
  return nowPlusMsWritten({ value: String }, ms);
}

/** nowPlusMsText with the interval written by `w` (a bound parameter, in a prepared statement: sql/common/bound.ts). */
export function nowPlusMsWritten(w: { value(v: number): string }, ms: number): string {
  const us = Math.round(ms * 1000);
  if (!Number.isSafeInteger(us)) throw new RangeError(`interval out of range: ${ms} ms`);
  return us === 0 ? 'NOW(6)' : `(NOW(6) + INTERVAL ${w.value(us)} MICROSECOND)`;
}

/**
 * "No time" in the DATETIME(6) columns a claim or a completion writes (lease
 * expiry, start, terminal time). They are NOT NULL since schema 2: a NULL
 * turning into a value changes a row's length, and InnoDB then cannot
 * update the row in place. Read back as null (rows.ts).
 */
export const NO_TIME_TEXT = "'1000-01-01 00:00:00'";
export const NO_TIME = sql.raw(NO_TIME_TEXT);

/** Width of the lease owner column (CHAR, ascii; fixed for the same reason as NO_TIME). */
export const OWNER_WIDTH = 64;

/**
 * The lease owner as the ledger stores it: the consumer's name folded to
 * printable ASCII (anything else becomes '?') and cut to OWNER_WIDTH. The
 * column is diagnostic (who holds an item); fencing is by the lease token.
 */
export function ownerColumn(owner: string): string {
  return owner.replace(/[^\x20-\x7e]/g, '?').slice(0, OWNER_WIDTH);
}

/** A map key for a value scoped to its queue (a lane, an idempotency key). */
export function queueScoped(queue: string, key: string): string {
  return `${queue}\u0000${key}`;
}

export function affected(result: { numAffectedRows?: bigint }): number {
  return Number(result.numAffectedRows ?? 0n);
}

/** Every column of an items row, as `toWorkItem` reads it. */
export const ITEM_COLUMNS =
  sql.raw(`id, queue, type, lane, lane_seq, is_head, concurrency_key, queue_class, priority, payload, state,
  run_after, attempt, max_attempts, lease_owner, lease_token, lease_until, epoch, idempotency_key,
  dependency_key, probe_after, blocked_at, block_expires_at, cancel_requested, checkpoint, progress, group_head, result,
  last_error, failure_class, replay_of, replayed_at, traceparent, created_at, started_at, terminal_at, updated_at,
  workflow_id`);

/**
 * The columns of an item as a list shows it (`toItemSummary`), read through
 * the alias `i.`: no payload, result or checkpoint; the error cut to 300
 * characters, with the digest of the whole of it as the replay guard
 * computes it (sql/operator/replay.ts); `created_key` keeps created_at's microseconds
 * (a JS Date drops them), for keyset cursors.
 */
export const SUMMARY_COLUMNS =
  sql.raw(`i.id, i.queue, i.type, i.state, i.lane, i.lane_seq, i.is_head, i.concurrency_key, i.queue_class,
  i.priority, i.attempt, i.max_attempts, i.run_after, i.created_at, i.started_at, i.terminal_at, i.failure_class,
  LEFT(i.last_error, 300) AS last_error, SHA2(COALESCE(i.last_error, ''), 256) AS error_digest, i.idempotency_key,
  DATE_FORMAT(i.created_at, '%Y-%m-%d %H:%i:%s.%f') AS created_key`);

/**
 * An error text as the ledger stores it: cut to the cap between whole
 * characters (never between the halves of a surrogate pair), and a lone
 * surrogate written as U+FFFD here rather than left to the driver. Error
 * texts are diagnostics a failed attempt must still record, so they are
 * mended, not refused.
 */
export function truncate(text: string | null | undefined, max: number): string | null {
  if (text === null || text === undefined) return null;
  // String.prototype.toWellFormed (Node 20; typed in lib ES2024).
  const whole = (text as unknown as { toWellFormed(): string }).toWellFormed();
  if (whole.length <= max) return whole;
  let end = max - 1;
  const last = whole.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end -= 1;
  return `${whole.slice(0, end)}…`;
}

/**
 * `utf8mb4_bin` order: by code point, as the UTF-8 bytes sort. JavaScript's
 * `<` compares UTF-16 code units, which puts a character above U+FFFF (a
 * surrogate pair, D800–DFFF) before one of U+E000–U+FFFF. (Lanes never end
 * in whitespace, so PAD SPACE only differs for a lane that is another plus
 * characters below U+0020, where MariaDB and TiDB disagree with each other;
 * a deadlock there is retried like any other.)
 */
export function byteOrder(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys && (xs ? y : x) >= 0xe000) return xs ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}
