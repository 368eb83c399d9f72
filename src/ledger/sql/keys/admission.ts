import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { inline, literal, queueScoped } from '../common/fragments.js';
import { storedKey, type KeyRule } from './scope.js';
import { type KeyCount, keyCounts, keyIn, perKey } from './key-counts.js';
import { currentRound } from './idle-keys.js';

/**
 * A key an enqueue admits items of, with the rule its items were scoped with and, in a fair queue, the queue's current
 * round.
 */
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
 * cost it more to plan than the items' own INSERT (docs/design/ledger-sql.md, "TiDB:
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
      `(${literal(k.queue)}, ${literal(k.key)}, ${first}, ${first}, ${round}, ${round + k.n}, ${
        k.round === null ? 0 : 1
      })`,
    );
  });
  const grant = sql`LEAST(${perKey(keys, (k) => k.admit)}, GREATEST(${perKey(keys, (k) => k.limit)} - ${
    t.keys
  }.admitted, 0))`;
  const from = sql`GREATEST(${t.keys}.next_round, ${perKey(keys, (k) => k.round ?? 0)})`;
  return sql`INSERT INTO ${t.keys} (queue, ckey, admitted, granted, round_from, next_round, fair) VALUES ${sql.join(
    rows,
  )}
    ON DUPLICATE KEY UPDATE granted = ${grant}, admitted = ${t.keys}.admitted + ${grant},
      round_from = ${from}, next_round = ${from} + ${perKey(keys, (k) => k.n)}, fair = ${perKey(keys, (k) =>
        k.round === null ? 0 : 1,
      )}`;
}

/** What admitStatement granted and dealt each key, read in its transaction. */
export function grantedRead(t: LedgerTables, keys: readonly KeyCount[]): RawBuilder<unknown> {
  return sql`SELECT queue, ckey, granted, round_from, fair FROM ${t.keys} WHERE (queue, ckey) IN (${keyIn(keys)})`;
}

/**
 * Per key (queue-scoped): how many of its new laneless items were admitted, and in a fair queue the first round its new
 * items take.
 */
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
