import { sql, type RawBuilder } from 'kysely';
import { groupBy } from '../../../group-by.js';
import { byteOrder, inline, list, literal, queueScoped } from '../common/fragments.js';
import type { KeyScope } from '../../types.js';
import { storedKey } from './scope.js';

// Concurrency keys (docs/design/keys.md, Concurrency keys): at most the queue's
// key_limit items of one key are admitted at once. An admitted item is a head
// (is_head = 1) and claimable as any head is; an item over the limit waits
// with is_head = 0, unseen by claims, and has a row in key_waits. The key's
// row counts its admitted items and is locked by every admission and every
// hand-on, so they take turns per key. A claim never reads a full key's
// backlog: the waiting items are not heads. Items with a lane as well are
// ordered and admitted by their lane; their key only deals their rounds.
//
// Fairness (docs/design/keys.md, Fair queues): in a queue marked fair, each
// keyed item's priority is its key's next round (plus its own priority), so
// claims, which take heads by priority, serve the keys in turn however many
// items or lanes one key has. A key's rounds start no lower than the queue's
// current round: the lowest of its pending heads, or, with none pending, the
// highest round completed.

/** Items of one key in a batch (enqueued, or ended). */
export interface KeyCount {
  queue: string;
  /** The key row's name: the items' stored key. */
  key: string;
  /** Every item of the key (each takes a round). */
  n: number;
  /** Those without a lane: the ones a key admits, and whose ends hand a slot on. */
  admit: number;
}

/**
 * Per key row (an item's stored key: sql/keys/scope.ts), how many of `items`
 * carry it; keys in their rows' key order (utf8mb4_bin), the order every
 * admission locks them in.
 */
export function keyCounts(
  items: readonly {
    queue: string;
    type: string;
    lane: string | null;
    concurrencyKey: string | null;
    keyScope?: KeyScope | null;
  }[],
): KeyCount[] {
  const counts = new Map<string, KeyCount>();
  for (const item of items) {
    const key = storedKey(item);
    if (key === null) continue;
    const k = queueScoped(item.queue, key);
    const admit = item.lane === null ? 1 : 0;
    const c = counts.get(k);
    if (c) {
      c.n++;
      c.admit += admit;
    } else counts.set(k, { queue: item.queue, key, n: 1, admit });
  }
  return sortKeys([...counts.values()]);
}

export function sortKeys(keys: KeyCount[]): KeyCount[] {
  return keys.sort((a, b) => (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : byteOrder(a.key, b.key)));
}

export function keyIn(keys: readonly { queue: string; key: string }[]): RawBuilder<unknown> {
  return sql.raw(keys.map((k) => `(${literal(k.queue)}, ${literal(k.key)})`).join(', '));
}

/**
 * Each key row's own number, in a statement that writes those rows: the
 * number itself when all have the same (the usual batch: one item of each
 * key), else one CASE arm per distinct number, not per key (a CASE is read
 * through for every row).
 */
export function perKey<K extends { queue: string; key: string }>(
  keys: readonly K[],
  value: (k: K) => number,
): RawBuilder<unknown> {
  const groups = [...groupBy(keys, value)];
  if (groups.length === 1) return inline(groups[0]![0]);
  const arms = groups.map(([n, ks]) => sql`WHEN (queue, ckey) IN (${keyIn(ks)}) THEN ${inline(n)}`);
  return sql`(CASE ${sql.join(arms, sql` `)} ELSE 0 END)`;
}

/**
 * `alias`'s rows of these keys, as a condition: per queue, its name and an
 * `IN` list of keys. TiDB builds the ranges of a `(queue, ckey) IN` list of
 * pairs on a longer primary key (key_waits') several times slower.
 */
export function ofKeys(alias: string, keys: readonly { queue: string; key: string }[]): RawBuilder<unknown> {
  const a = sql.raw(alias);
  return sql.join(
    [...groupBy(keys, (k) => k.queue)].map(
      ([queue, ks]) =>
        sql`(${a}.queue = ${inline(queue)} AND ${a}.ckey IN (${list([...new Set(ks.map((k) => k.key))])}))`,
    ),
    sql` OR `,
  );
}
