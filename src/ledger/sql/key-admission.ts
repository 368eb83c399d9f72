import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../connection.js';
import { retryOnConflict } from '../retry.js';
import type { LedgerTables } from '../tables.js';
import { groupBy } from '../../group-by.js';
import { byteOrder, inline, list, literal, queueScoped } from './common.js';
import type { KeyScope } from '../types.js';
import { storedKey, typeLimitOf, UNLIMITED } from './key-scope.js';

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
 * Per key row (an item's stored key: sql/key-scope.ts), how many of `items`
 * carry it; keys in their rows' key order (utf8mb4_bin), the order every
 * admission locks them in.
 */
export function keyCounts(items: readonly { queue: string; type: string; lane: string | null; concurrencyKey: string | null; keyScope?: KeyScope | null }[]): KeyCount[] {
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
 * Admits an enqueue's keyed items and deals their rounds: per key, `granted`
 * of its `admit` laneless new items take its free slots (the first `granted`
 * of them in the batch), and the key counts them; in a fair queue its items
 * take the rounds from `round_from` on. Every expression reads only the old
 * row, which MySQL, MariaDB (left to right) and TiDB (old row throughout)
 * then all read alike. The queue's limit, fairness and current round are
 * read once per queue in the same statement. The rows are written (and
 * locked) in `keys`' order, the order every hand-on locks keys in: left to
 * the join, MariaDB wrote them in another, and an enqueue and a completion
 * that shared keys deadlocked.
 */
export function admitStatement(t: LedgerTables, keys: readonly KeyCount[]): RawBuilder<unknown> {
  const rows = keys.map((k, i) => {
    const as = (name: string): string => (i === 0 ? ` AS ${name}` : '');
    return sql`SELECT _ascii${inline(k.queue)}${sql.raw(as('queue'))}, ${inline(k.key)}${sql.raw(as('ckey'))}, ${inline(k.n)}${sql.raw(as('n'))},
      ${inline(k.admit)}${sql.raw(as('admit'))}, ${typeLimitOf(t, k)}${sql.raw(as('tlim'))}, ${inline(i)}${sql.raw(as('ord'))} FROM DUAL`;
  });
  const queues = [...new Set(keys.map((k) => k.queue))].map((queue, i) => {
    const as = (name: string): string => (i === 0 ? ` AS ${name}` : '');
    const fair = sql`COALESCE((SELECT fair FROM ${t.queues} WHERE queue = ${inline(queue)}), 0)`;
    return sql`SELECT _ascii${inline(queue)}${sql.raw(as('queue'))},
      COALESCE((SELECT key_limit FROM ${t.queues} WHERE queue = ${inline(queue)}), ${inline(UNLIMITED)})${sql.raw(as('lim'))},
      ${fair}${sql.raw(as('fair'))}, IF(${fair} = 1, ${currentRound(t, queue)}, 0)${sql.raw(as('round_now'))} FROM DUAL`;
  });
  const lim = sql`COALESCE(v.tlim, q.lim)`;
  const grant = sql`LEAST(v.admit, GREATEST(${lim} - ${t.keys}.admitted, 0))`;
  const from = sql`GREATEST(${t.keys}.next_round, q.round_now)`;
  return sql`INSERT INTO ${t.keys} (queue, ckey, admitted, granted, round_from, next_round, fair)
    SELECT v.queue, v.ckey, LEAST(v.admit, ${lim}), LEAST(v.admit, ${lim}), q.round_now, q.round_now + v.n, q.fair
    FROM (${sql.join(rows, sql` UNION ALL `)}) AS v JOIN (${sql.join(queues, sql` UNION ALL `)}) AS q ON q.queue = v.queue
    ORDER BY v.ord
    ON DUPLICATE KEY UPDATE granted = ${grant}, admitted = ${t.keys}.admitted + ${grant},
      round_from = ${from}, next_round = ${from} + v.n, fair = q.fair`;
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
export async function deleteIdleKeys(db: LedgerDb, t: LedgerTables, keys: readonly { queue: string; key: string }[]): Promise<void> {
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
export function grantedByKey(rows: readonly Record<string, unknown>[]): Map<string, { granted: number; roundFrom: number | null }> {
  return new Map(
    rows.map((r) => [queueScoped(String(r.queue), String(r.ckey)), { granted: Number(r.granted), roundFrom: Number(r.fair) === 1 ? Number(r.round_from) : null }]),
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
