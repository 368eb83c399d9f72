import { sql, type RawBuilder } from 'kysely';
import { ValidationError } from '../../../errors.js';
import type { Executor } from '../../connection.js';
import { ER_NO_SUCH_TABLE, errno } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import type { KeyScope } from '../../types.js';
import { inline, list, literal, queueScoped } from '../common/fragments.js';

// Whose limit admits a keyed item (docs/design/keys.md, Concurrency keys): its
// queue's `key_limit`, per key, or, when its type has a limit of its own
// (`lw_type_limits`), that one, per key and type. A type's keys are then
// rows of their own, named `type␟key` (U+001F, which no concurrency key
// holds): their count, their line and their rounds are apart from the
// queue's. Which row admits an item is decided at its enqueue and kept with
// it, as the item's stored concurrency_key, so each end hands the slot back
// to the row that gave it, whatever limits were set since. Everything in
// sql/keys/admission.ts works on those stored names.

export const TYPE_KEY_SEPARATOR = '\u001f';
/**
 * A limit no key reaches: a queue without key_limit, or a type whose own limit was lifted, admits every keyed item (and
 * still counts them).
 */
export const UNLIMITED = 1_000_000_000;
/** The longest stored key: the column's width. */
const MAX_STORED_KEY = 255;

/** The stored key of an item (its key row's name), or null without a key. */
export function storedKey(item: {
  type: string;
  concurrencyKey: string | null;
  keyScope?: KeyScope | null;
}): string | null {
  if (item.concurrencyKey === null) return null;
  return item.keyScope === 'type' ? `${item.type}${TYPE_KEY_SEPARATOR}${item.concurrencyKey}` : item.concurrencyKey;
}

/** The key the caller gave, from a stored key. */
export function givenKey(stored: string | null): string | null {
  if (stored === null) return null;
  const at = stored.indexOf(TYPE_KEY_SEPARATOR);
  return at < 0 ? stored : stored.slice(at + 1);
}

/** Whose limit admitted the item with this stored key; null without a key. */
export function scopeOfKey(stored: string | null): KeyScope | null {
  if (stored === null) return null;
  return stored.includes(TYPE_KEY_SEPARATOR) ? 'type' : 'queue';
}

/** The type whose own limit admits a stored key's items, or null (its queue's). */
export function typeOfKey(stored: string): string | null {
  const at = stored.indexOf(TYPE_KEY_SEPARATOR);
  return at < 0 ? null : stored.slice(0, at);
}

/** A type's own limit per key in its queue. */
export interface TypeLimit {
  queue: string;
  type: string;
  limit: number;
}

/** What admits the keyed items of some queues, as set when an enqueue read it (readKeyRules). */
export interface KeyRules {
  /** Per queue with a row: its limit per key (null: none) and whether it is fair. */
  queues: Map<string, { limit: number | null; fair: boolean }>;
  types: TypeLimit[];
}

/** What admits a keyed item: the limit its key row answers to (UNLIMITED: none), and whether its queue is fair. */
export interface KeyRule {
  limit: number;
  fair: boolean;
}

/**
 * The queues' limits per key, their fairness and their types' own limits,
 * in one statement, read before an enqueue's transaction: the admission
 * then writes its key rows with every number in its text
 * (sql/keys/admission.ts). On a ledger before type limits (schema 10) there
 * are none.
 */
export async function readKeyRules(exec: Executor, t: LedgerTables, queues: readonly string[]): Promise<KeyRules> {
  const names = list([...new Set(queues)]);
  const own = sql`SELECT queue, _ascii'' AS type, key_limit, fair FROM ${t.queues} WHERE queue IN (${names})`;
  let rows: Record<string, unknown>[];
  try {
    rows = (
      await sql<
        Record<string, unknown>
      >`${own} UNION ALL SELECT queue, type, key_limit, 0 FROM ${t.typeLimits} WHERE queue IN (${
        names
      }) ORDER BY queue, type`.execute(exec)
    ).rows;
  } catch (error) {
    if (errno(error) !== ER_NO_SUCH_TABLE) throw error;
    rows = (await sql<Record<string, unknown>>`${own}`.execute(exec)).rows;
  }
  const rules: KeyRules = { queues: new Map(), types: [] };
  for (const r of rows) {
    const queue = String(r.queue);
    if (r.type !== '') rules.types.push({ queue, type: String(r.type), limit: Number(r.key_limit) });
    else
      rules.queues.set(queue, { limit: r.key_limit === null ? null : Number(r.key_limit), fair: Number(r.fair) === 1 });
  }
  return rules;
}

/**
 * Gives each keyed item the scope its type's limits say, and the rule that
 * admits it. A type-scoped key must fit the stored column with its type:
 * refused, naming the item's field, before anything is written.
 */
export function scopeKeys<
  I extends { queue: string; type: string; concurrencyKey: string | null; keyScope?: KeyScope; keyRule?: KeyRule },
>(items: readonly I[], rules: KeyRules, prefix: string): void {
  const limited = new Map(rules.types.map((l) => [queueScoped(l.queue, l.type), l.limit]));
  const issues: { field: string; message: string }[] = [];
  items.forEach((item, i) => {
    if (item.concurrencyKey === null) return;
    const own = limited.get(queueScoped(item.queue, item.type));
    const queue = rules.queues.get(item.queue);
    item.keyScope = own === undefined ? 'queue' : 'type';
    item.keyRule = { limit: own ?? queue?.limit ?? UNLIMITED, fair: queue?.fair ?? false };
    const room = MAX_STORED_KEY - item.type.length - TYPE_KEY_SEPARATOR.length;
    if (item.keyScope === 'type' && item.concurrencyKey.length > room)
      issues.push({
        field: prefix === '' ? 'concurrencyKey' : `${prefix}[${i}].concurrencyKey`,
        message: `must be at most ${room} characters: its type ${
          item.type
        } has a concurrency limit of its own, and type and key are stored together`,
      });
  });
  if (issues.length > 0) throw new ValidationError(issues, 'enqueue');
}

/**
 * The limit a key row (by its stored name) answers to, read in the statement: its type's own or its queue's; NULL when
 * none is set.
 */
export function keyRowLimit(t: LedgerTables, k: { queue: string; key: string }): RawBuilder<unknown> {
  const type = typeOfKey(k.key);
  return type === null
    ? sql`(SELECT key_limit FROM ${t.queues} WHERE queue = ${inline(k.queue)})`
    : sql`(SELECT key_limit FROM ${t.typeLimits} WHERE queue = ${inline(k.queue)} AND type = ${inline(type)})`;
}

/** The limits these key rows answer to: their queues' (type ''), and the types' own of type-scoped rows. */
export function limitsRead(t: LedgerTables, keys: readonly { queue: string; key: string }[]): RawBuilder<unknown> {
  const queues = sql`SELECT queue, _ascii'' AS type, key_limit FROM ${t.queues} WHERE queue IN (${list([
    ...new Set(keys.map((k) => k.queue)),
  ])})`;
  const pairs = keys.flatMap((k) => {
    const type = typeOfKey(k.key);
    return type === null ? [] : [`(${literal(k.queue)}, ${literal(type)})`];
  });
  const types = [...new Set(pairs)];
  if (types.length === 0) return queues;
  return sql`${queues} UNION ALL SELECT queue, type, key_limit FROM ${t.typeLimits} WHERE (queue, type) IN (${sql.raw(
    types.join(', '),
  )})`;
}

/** Which limit a key row answers to: its queue's (type '') or its type's own. */
export function limitScope(k: { queue: string; key: string }): string {
  return queueScoped(k.queue, typeOfKey(k.key) ?? '');
}

/** The limits limitsRead found, by limitScope; a key whose limit is absent has none. */
export function keyLimits(rows: readonly Record<string, unknown>[]): Map<string, number> {
  return new Map(
    rows
      .filter((x) => x.key_limit !== null)
      .map((x) => [queueScoped(String(x.queue), String(x.type)), Number(x.key_limit)]),
  );
}
