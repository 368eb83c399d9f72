import { sql, type RawBuilder } from 'kysely';
import type { LedgerTables } from '../../tables.js';
import { queueScoped } from '../common/fragments.js';
import { refuseIf } from '../common/guard.js';
import { keyIn, ofKeys, perKey, sortKeys, type KeyCount } from './key-counts.js';
import type { WaitRow } from './waiting-line.js';

/**
 * The hand-on when none of these keys has a waiting item, the usual case for
 * keys below their limits: each key gives up its ended slots, in statements
 * that go with the ending and the COMMIT in one round trip. The UPDATE locks
 * the key rows, in their order, as lockKeys does; the guard after it reads
 * their lines after the locks, so an admission that made an item wait has
 * committed its wait row, and refuses the transaction if a key has one. The
 * caller then runs handOnKeys. `ended` is keyCounts' answer: one count per
 * key, in key order.
 */
export function releaseUnwaited(t: LedgerTables, ended: readonly KeyCount[]): RawBuilder<unknown>[] {
  const slots = ended.filter((k) => k.admit > 0);
  if (slots.length === 0) return [];
  return [
    sql`UPDATE ${t.keys} SET admitted = GREATEST(admitted - ${perKey(
      slots,
      (k) => k.admit,
    )}, 0) WHERE (queue, ckey) IN (${keyIn(slots)})`,
    refuseIf(t, sql`EXISTS (SELECT 1 FROM ${t.keyWaits} w WHERE ${ofKeys('w', slots)})`),
  ];
}

export interface KeyDelta {
  queue: string;
  key: string;
  n: number;
}

/** How many of `rows` each key has. */
export function countPerKey(rows: readonly WaitRow[]): KeyDelta[] {
  const m = new Map<string, KeyDelta>();
  for (const r of rows) {
    const k = queueScoped(r.queue, r.ckey);
    const d = m.get(k);
    if (d) d.n++;
    else m.set(k, { queue: r.queue, key: r.ckey, n: 1 });
  }
  return [...m.values()];
}

export function lockKeys(t: LedgerTables, keys: readonly KeyCount[]): RawBuilder<unknown> {
  return sql`SELECT queue, ckey, admitted FROM ${t.keys} WHERE (queue, ckey) IN (${keyIn(
    keys,
  )}) ORDER BY queue, ckey FOR UPDATE`;
}

/** Each key counts `n` more admitted items (fewer, when negative). */
export function addHeld(t: LedgerTables, deltas: readonly KeyDelta[]): RawBuilder<unknown> {
  return sql`UPDATE ${t.keys} SET admitted = admitted + ${perKey(deltas, (d) => d.n)} WHERE (queue, ckey) IN (${keyIn(
    deltas,
  )})`;
}

export function mergeCounts(ended: readonly KeyCount[]): KeyCount[] {
  const m = new Map<string, KeyCount>();
  for (const e of ended) {
    const k = queueScoped(e.queue, e.key);
    const c = m.get(k);
    if (c) {
      c.n += e.n;
      c.admit += e.admit;
    } else m.set(k, { ...e });
  }
  return sortKeys([...m.values()]);
}
