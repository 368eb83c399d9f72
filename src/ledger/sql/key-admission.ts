import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import { affected, inline, list, literal, queueScoped } from './common.js';
import { writeQueueSetting } from './queue-settings.js';

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
  key: string;
  /** Every item of the key (each takes a round). */
  n: number;
  /** Those without a lane: the ones a key admits, and whose ends hand a slot on. */
  admit: number;
}

/** A limit no key reaches: a queue without key_limit admits every keyed item (and still counts them). */
const UNLIMITED = 1_000_000_000;
/** The most waiting items one hand-on admits per key (a raised limit admits the rest at the next). */
const MAX_ADMIT = 500;

/** Per key, how many of `items` carry it; keys in their rows' key order (utf8mb4_bin), the order every admission locks them in. */
export function keyCounts(items: readonly { queue: string; lane: string | null; concurrencyKey: string | null }[]): KeyCount[] {
  const counts = new Map<string, KeyCount>();
  for (const item of items) {
    if (item.concurrencyKey === null) continue;
    const k = queueScoped(item.queue, item.concurrencyKey);
    const admit = item.lane === null ? 1 : 0;
    const c = counts.get(k);
    if (c) {
      c.n++;
      c.admit += admit;
    } else counts.set(k, { queue: item.queue, key: item.concurrencyKey, n: 1, admit });
  }
  return sortKeys([...counts.values()]);
}

function sortKeys(keys: KeyCount[]): KeyCount[] {
  return keys.sort((a, b) => (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : byteOrder(a.key, b.key)));
}

/** utf8mb4_bin order: by code point (a character above U+FFFF after U+E000–U+FFFF, as its UTF-8 bytes sort). */
function byteOrder(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i]!.codePointAt(0)! - y[i]!.codePointAt(0)!;
    if (d !== 0) return d;
  }
  return x.length - y.length;
}

function keyIn(keys: readonly KeyCount[]): RawBuilder<unknown> {
  return sql.raw(keys.map((k) => `(${literal(k.queue)}, ${literal(k.key)})`).join(', '));
}

/**
 * Admits an enqueue's keyed items and deals their rounds: per key, `granted`
 * of its `admit` laneless new items take its free slots (the first `granted`
 * of them in the batch), and the key counts them; in a fair queue its items
 * take the rounds from `round_from` on. Every expression reads only the old
 * row, which MySQL, MariaDB (left to right) and TiDB (old row throughout)
 * then all read alike. The queue's limit, fairness and current round are
 * read once per queue in the same statement.
 */
export function admitStatement(t: LedgerTables, keys: readonly KeyCount[]): RawBuilder<unknown> {
  const rows = keys.map((k, i) => {
    const as = (name: string): string => (i === 0 ? ` AS ${name}` : '');
    return sql`SELECT _ascii${inline(k.queue)}${sql.raw(as('queue'))}, ${inline(k.key)}${sql.raw(as('ckey'))}, ${inline(k.n)}${sql.raw(as('n'))},
      ${inline(k.admit)}${sql.raw(as('admit'))} FROM DUAL`;
  });
  const queues = [...new Set(keys.map((k) => k.queue))].map((queue, i) => {
    const as = (name: string): string => (i === 0 ? ` AS ${name}` : '');
    const fair = sql`COALESCE((SELECT fair FROM ${t.queues} WHERE queue = ${inline(queue)}), 0)`;
    return sql`SELECT _ascii${inline(queue)}${sql.raw(as('queue'))},
      COALESCE((SELECT key_limit FROM ${t.queues} WHERE queue = ${inline(queue)}), ${inline(UNLIMITED)})${sql.raw(as('lim'))},
      ${fair}${sql.raw(as('fair'))}, IF(${fair} = 1, ${currentRound(t, queue)}, 0)${sql.raw(as('round_now'))} FROM DUAL`;
  });
  const grant = sql`LEAST(v.admit, GREATEST(q.lim - ${t.keys}.admitted, 0))`;
  const from = sql`GREATEST(${t.keys}.next_round, q.round_now)`;
  return sql`INSERT INTO ${t.keys} (queue, ckey, admitted, granted, round_from, next_round, fair)
    SELECT v.queue, v.ckey, LEAST(v.admit, q.lim), LEAST(v.admit, q.lim), q.round_now, q.round_now + v.n, q.fair
    FROM (${sql.join(rows, sql` UNION ALL `)}) AS v JOIN (${sql.join(queues, sql` UNION ALL `)}) AS q ON q.queue = v.queue
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
  return sql`IF(LEAST(${edge('MIN', 'pending')}) < ${inline(NONE)}, LEAST(${edge('MIN', 'pending')}), GREATEST(${edge('MAX', 'completed')}))`;
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

interface WaitRow {
  queue: string;
  ckey: string;
  at: string;
  seq: number;
  id: string;
}

/**
 * Admitted laneless items of these keys ended (`admit` of each; 0 when a
 * limit was raised): under each key's row lock, its earliest-due waiting items take
 * the slots that are free now, and the key counts what it holds. Call it in
 * the transaction that ended them. The row lock comes first, so hand-ons
 * and admissions of one key take turns, and a waiting item is admitted once.
 */
export async function handOnKeys(exec: Executor, t: LedgerTables, ended: readonly KeyCount[]): Promise<void> {
  if (ended.length === 0) return;
  const keys = mergeCounts(ended);
  const rows = await sql<{ queue: string; ckey: string; admitted: number | string }>`SELECT queue, ckey, admitted FROM ${t.keys}
    WHERE (queue, ckey) IN (${keyIn(keys)}) ORDER BY queue, ckey FOR UPDATE`.execute(exec);
  const limits = await queueLimits(exec, t, [...new Set(keys.map((k) => k.queue))]);
  const held = new Map<string, number>();
  for (const r of rows.rows) {
    const ended = keys.find((k) => k.queue === r.queue && k.key === r.ckey)?.admit ?? 0;
    held.set(queueScoped(r.queue, r.ckey), Math.max(0, Number(r.admitted) - ended));
  }
  for (let round = 0; round < 4; round++) {
    const wants = keys
      .map((k) => {
        const now = held.get(queueScoped(k.queue, k.key));
        const free = now === undefined ? 0 : (limits.get(k.queue) ?? UNLIMITED) - now;
        return { k, take: Math.min(MAX_ADMIT, Math.max(0, free)) };
      })
      .filter((w) => w.take > 0);
    const waiting = wants.length === 0 ? [] : await readWaiting(exec, t, wants);
    const admitted = waiting.length === 0 ? new Set<string>() : await admit(exec, t, waiting);
    for (const w of waiting) {
      if (!admitted.has(w.id)) continue;
      const k = queueScoped(w.queue, w.ckey);
      held.set(k, (held.get(k) ?? 0) + 1);
    }
    // A waiting item cancelled meanwhile was passed over: its key looks again, once its slots are not all taken.
    const short = wants.some((w) => {
      const read = waiting.filter((x) => x.queue === w.k.queue && x.ckey === w.k.key);
      return read.length === w.take && read.some((x) => !admitted.has(x.id));
    });
    if (!short) break;
  }
  if (rows.rows.length > 0) {
    const cases = sql.join(
      rows.rows.map((r) => sql`WHEN queue = ${inline(r.queue)} AND ckey = ${inline(r.ckey)} THEN ${inline(held.get(queueScoped(r.queue, r.ckey)) ?? 0)}`),
      sql` `,
    );
    await sql`UPDATE ${t.keys} SET admitted = CASE ${cases} ELSE admitted END WHERE (queue, ckey) IN (${keyIn(keys)})`.execute(exec);
  }
}

function mergeCounts(ended: readonly KeyCount[]): KeyCount[] {
  const m = new Map<string, KeyCount>();
  for (const e of ended) {
    const k = queueScoped(e.queue, e.key);
    const c = m.get(k);
    if (c) {
      c.n += e.n;
      c.admit += e.admit;
    }
    else m.set(k, { ...e });
  }
  return sortKeys([...m.values()]);
}

async function queueLimits(exec: Executor, t: LedgerTables, queues: readonly string[]): Promise<Map<string, number>> {
  const r = await sql<{ queue: string; key_limit: number | null }>`SELECT queue, key_limit FROM ${t.queues} WHERE queue IN (${list(queues)})`.execute(exec);
  return new Map(r.rows.filter((x) => x.key_limit !== null).map((x) => [x.queue, Number(x.key_limit)]));
}

/** Each key's earliest-due waiting items, up to its free slots: one ordered range of key_waits each. */
async function readWaiting(exec: Executor, t: LedgerTables, wants: readonly { k: KeyCount; take: number }[]): Promise<WaitRow[]> {
  const parts = wants.map(
    (w) => sql`(SELECT queue, ckey, DATE_FORMAT(run_after, '%Y-%m-%d %H:%i:%s.%f') AS at, seq, id FROM ${t.keyWaits}
      WHERE queue = ${inline(w.k.queue)} AND ckey = ${inline(w.k.key)} ORDER BY run_after, seq, id LIMIT ${inline(w.take)})`,
  );
  return (await sql<WaitRow>`${sql.join(parts, sql` UNION ALL `)}`.execute(exec)).rows;
}

/** The waiting items become heads and leave the line; returns those admitted (one cancelled meanwhile is not). */
async function admit(exec: Executor, t: LedgerTables, waiting: readonly WaitRow[]): Promise<Set<string>> {
  const ids = waiting.map((w) => w.id);
  const set = await sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6) WHERE id IN (${list(ids)}) AND state = 'pending' AND is_head = 0`.execute(exec);
  let admitted = new Set(ids);
  if (affected(set) !== ids.length) {
    const r = await sql<{ id: string }>`SELECT id FROM ${t.items} WHERE id IN (${list(ids)}) AND is_head = 1 AND state = 'pending'`.execute(exec);
    admitted = new Set(r.rows.map((x) => x.id));
  }
  const places = waiting.map((w) => `(${literal(w.queue)}, ${literal(w.ckey)}, ${literal(w.at)}, ${literal(Number(w.seq))}, ${literal(w.id)})`).join(', ');
  await sql`DELETE FROM ${t.keyWaits} WHERE (queue, ckey, run_after, seq, id) IN (${sql.raw(places)})`.execute(exec);
  return admitted;
}

/**
 * Sets (or, with null, lifts) a queue's limit per concurrency key, then lets
 * each key with items waiting take the slots the new limit frees, a key per
 * transaction. Returns how many keys had items waiting.
 */
export async function setKeyLimit(db: LedgerDb, t: LedgerTables, queue: string, limit: number | null): Promise<number> {
  await writeQueueSetting(db, t, queue, 'key_limit', limit);
  const keys = await sql<{ ckey: string }>`SELECT DISTINCT ckey FROM ${t.keyWaits} WHERE queue = ${queue}`.execute(db);
  for (const r of keys.rows) await db.transaction().execute((trx) => handOnKeys(trx, t, [{ queue, key: r.ckey, n: 0, admit: 0 }]));
  return keys.rows.length;
}

/** A key's admitted count and its queue's limit (null: none), for explain. */
export async function keyStanding(exec: Executor, t: LedgerTables, queue: string, key: string): Promise<{ admitted: number; limit: number | null; waiting: number }> {
  const r = await sql<{ admitted: number | string | null; key_limit: number | null; waiting: number | string }>`SELECT
      (SELECT admitted FROM ${t.keys} WHERE queue = ${queue} AND ckey = ${key}) AS admitted,
      (SELECT key_limit FROM ${t.queues} WHERE queue = ${queue}) AS key_limit,
      (SELECT COUNT(*) FROM ${t.keyWaits} WHERE queue = ${queue} AND ckey = ${key}) AS waiting`.execute(exec);
  const row = r.rows[0];
  return { admitted: Number(row?.admitted ?? 0), limit: row?.key_limit === null || row?.key_limit === undefined ? null : Number(row.key_limit), waiting: Number(row?.waiting ?? 0) };
}
