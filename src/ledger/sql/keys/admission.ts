import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import { retryOnConflict } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import { groupBy } from '../../../group-by.js';
import { byteOrder, inline, list, literal, queueScoped } from '../common/fragments.js';
import type { KeyScope } from '../../types.js';
import { storedKey, type KeyRule } from './scope.js';

// Concurrency keys (docs/design.md §3, Concurrency keys): at most the queue's
// key_limit items of one key are admitted at once. An admitted item is a head
// (is_head = 1) and claimable as any head is; an item over the limit waits
// with is_head = 0, unseen by claims, and has a row in key_waits. The key's
// row counts its admitted items and is locked by every admission and every
// hand-on, so they take turns per key. A claim never reads a full key's
// backlog: the waiting items are not heads. Items with a lane as well are
// ordered and admitted by their lane; their key only deals their rounds.
//
// Fairness (docs/design.md §3, Fair queues): in a queue marked fair, each
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

/** A key an enqueue admits items of, with the rule its items were scoped with and, in a fair queue, the queue's current round. */
export interface AdmittedKey extends KeyCount {
  limit: number;
  round: number | null;
}

/**
 * The keys of an enqueue's keyed items (scoped: sql/keys/scope.ts), in
 * keyCounts' order, each with its rule; the current round of each fair
 * queue among them is read on `exec` (one statement, only when there is
 * one: non-fair queues read nothing here).
 */
export async function admittedKeys(
  exec: Executor,
  t: LedgerTables,
  items: readonly NewKeyedItem[],
): Promise<AdmittedKey[]> {
  const rules = new Map<string, KeyRule>();
  for (const item of items) {
    const key = storedKey(item);
    if (key === null) continue;
    if (item.keyRule === undefined)
      throw new Error('admission: a keyed item was not scoped (sql/keys/scope.ts scopeKeys)');
    rules.set(queueScoped(item.queue, key), item.keyRule);
  }
  const keys = keyCounts(items);
  const fair = [
    ...new Set(keys.filter((k) => rules.get(queueScoped(k.queue, k.key))?.fair === true).map((k) => k.queue)),
  ];
  const rounds = new Map<string, number>();
  if (fair.length > 0) {
    const r = await sql<{ queue: string; round_now: number | string }>`${sql.join(
      fair.map(
        (queue) => sql`SELECT _ascii${inline(queue)} AS queue, ${currentRound(t, queue)} AS round_now FROM DUAL`,
      ),
      sql` UNION ALL `,
    )}`.execute(exec);
    for (const row of r.rows) rounds.set(String(row.queue), Number(row.round_now));
  }
  return keys.map((k) => {
    const rule = rules.get(queueScoped(k.queue, k.key))!;
    return { ...k, limit: rule.limit, round: rule.fair ? (rounds.get(k.queue) ?? 0) : null };
  });
}

type NewKeyedItem = Parameters<typeof keyCounts>[0][number] & { keyRule?: KeyRule };

/**
 * Admits an enqueue's keyed items and deals their rounds: per key, `granted`
 * of its `admit` laneless new items take its free slots (the first `granted`
 * of them in the batch), and the key counts them; in a fair queue its items
 * take the rounds from `round_from` on. The limits, the fairness and the
 * rounds were read before (admittedKeys), so every number is in the text:
 * TiDB plans a statement sent as text afresh each time, and a derived table
 * of one SELECT per key, with the queue's settings read in subqueries,
 * cost it more to plan than the items' own INSERT (docs/design.md, "TiDB:
 * what differs"). Every expression reads only the old row, which MySQL,
 * MariaDB (left to right) and TiDB (old row throughout) then all read
 * alike. The rows are written (and locked) in `keys`' order, the order
 * every hand-on locks keys in: an enqueue and a completion that locked
 * shared keys in different orders deadlocked.
 */
export function admitStatement(t: LedgerTables, keys: readonly AdmittedKey[]): RawBuilder<unknown> {
  const rows = keys.map((k) => {
    const first = Math.min(k.admit, k.limit);
    const round = k.round ?? 0;
    return sql.raw(
      `(${literal(k.queue)}, ${literal(k.key)}, ${first}, ${first}, ${round}, ${round + k.n}, ${k.round === null ? 0 : 1})`,
    );
  });
  const grant = sql`LEAST(${perKey(keys, (k) => k.admit)}, GREATEST(${perKey(keys, (k) => k.limit)} - ${t.keys}.admitted, 0))`;
  const from = sql`GREATEST(${t.keys}.next_round, ${perKey(keys, (k) => k.round ?? 0)})`;
  return sql`INSERT INTO ${t.keys} (queue, ckey, admitted, granted, round_from, next_round, fair) VALUES ${sql.join(rows)}
    ON DUPLICATE KEY UPDATE granted = ${grant}, admitted = ${t.keys}.admitted + ${grant},
      round_from = ${from}, next_round = ${from} + ${perKey(keys, (k) => k.n)}, fair = ${perKey(keys, (k) => (k.round === null ? 0 : 1))}`;
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

/**
 * A fair queue's current round: the lowest priority among its pending heads
 * (one index lookup per class, on ix_claim), or, with none pending, the
 * highest among its completed items, or 0.
 */
function currentRound(t: LedgerTables, queue: string): RawBuilder<unknown> {
  // LEAST and GREATEST are NULL if any argument is: a class without such items stands in as the far end.
  const NONE = 2_147_483_647;
  const edge = (fn: 'MIN' | 'MAX', state: string): RawBuilder<unknown> =>
    sql.join(
      ['interactive', 'default', 'bulk'].map(
        (c) =>
          sql`COALESCE((SELECT ${sql.raw(fn)}(priority) FROM ${t.items} WHERE queue = ${inline(queue)} AND queue_class = ${inline(c)} AND state = ${inline(state)} AND is_head = 1), ${inline(fn === 'MIN' ? NONE : 0)})`,
      ),
    );
  return sql`COALESCE(NULLIF(LEAST(${edge('MIN', 'pending')}), ${inline(NONE)}), GREATEST(${edge('MAX', 'completed')}))`;
}

/**
 * Deletes the rows of these keys that hold nothing: no admitted item, no
 * waiting one, and in a fair queue no round dealt past the queue's current
 * one (a new batch would start there anyway). Purge calls it for the keys of
 * the items it deleted, so a tenant key used once does not keep a row for
 * ever. An admission that upserts a key at the same time either finds the
 * row gone and makes it afresh, or has counted an item first, and then the
 * row stays: the DELETE re-reads each row it locks.
 */
export async function deleteIdleKeys(
  db: LedgerDb,
  t: LedgerTables,
  keys: readonly { queue: string; key: string }[],
): Promise<void> {
  for (const [queue, group] of groupBy(keys, (k) => k.queue)) {
    const ckeys = group.map((k) => k.key);
    await retryOnConflict(() =>
      sql`DELETE FROM ${t.keys} WHERE queue = ${inline(queue)} AND ckey IN (${list([...new Set(ckeys)])}) AND admitted = 0
        AND NOT EXISTS (SELECT 1 FROM ${t.keyWaits} w WHERE w.queue = ${t.keys}.queue AND w.ckey = ${t.keys}.ckey)
        AND (fair = 0 OR next_round <= ${currentRound(t, queue)})`.execute(db),
    );
  }
}

/** What admitStatement granted and dealt each key, read in its transaction. */
export function grantedRead(t: LedgerTables, keys: readonly KeyCount[]): RawBuilder<unknown> {
  return sql`SELECT queue, ckey, granted, round_from, fair FROM ${t.keys} WHERE (queue, ckey) IN (${keyIn(keys)})`;
}

/** Per key (queue-scoped): how many of its new laneless items were admitted, and in a fair queue the first round its new items take. */
export function grantedByKey(
  rows: readonly Record<string, unknown>[],
): Map<string, { granted: number; roundFrom: number | null }> {
  return new Map(
    rows.map((r) => [
      queueScoped(String(r.queue), String(r.ckey)),
      { granted: Number(r.granted), roundFrom: Number(r.fair) === 1 ? Number(r.round_from) : null },
    ]),
  );
}

/**
 * The wait rows of the new items that were not admitted: after their insert,
 * in its transaction. Items due at one instant are one batch's: `seq`, the
 * place in the batch, keeps them in the order they were enqueued.
 */
export function waitRowsFor(t: LedgerTables, ids: readonly string[]): RawBuilder<unknown> {
  return sql`INSERT INTO ${t.keyWaits} (queue, ckey, run_after, seq, id)
    SELECT queue, concurrency_key, run_after, FIELD(id, ${list(ids)}), id FROM ${t.items}
    WHERE id IN (${list(ids)}) AND concurrency_key IS NOT NULL AND lane IS NULL AND is_head = 0`;
}

/** A waiting item that ended (cancelled) gives up its place in its key's line. */
export async function leaveKeyWait(exec: Executor, t: LedgerTables, id: string): Promise<void> {
  await sql`DELETE w FROM ${t.keyWaits} w JOIN ${t.items} i ON i.id = ${id}
    AND w.queue = i.queue AND w.ckey = i.concurrency_key AND w.run_after = i.run_after AND w.id = i.id`.execute(exec);
}
