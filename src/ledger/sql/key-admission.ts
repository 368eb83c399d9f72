import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../connection.js';
import { retryOnConflict } from '../retry.js';
import type { LedgerTables } from '../tables.js';
import { byteOrder, inline, list, literal, queueScoped } from './common.js';
import type { ClaimedRow } from '../rows.js';
import type { ClaimedItem, KeyScope, SuccessorClaim } from '../types.js';
import { claimedItems, grantLease, leaseAssignments, readBackClaimed, type Lease } from './claimed.js';
import type { Send, StatementResult } from './pipeline.js';
import { keyLimits, limitScope, limitsRead, storedKey, typeLimitOf, UNLIMITED } from './key-scope.js';

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

/** The most waiting items one hand-on admits per key (a raised limit admits the rest at the next). */
const MAX_ADMIT = 500;

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

function sortKeys(keys: KeyCount[]): KeyCount[] {
  return keys.sort((a, b) => (a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : byteOrder(a.key, b.key)));
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
      ${inline(k.admit)}${sql.raw(as('admit'))}, ${typeLimitOf(t, k)}${sql.raw(as('tlim'))} FROM DUAL`;
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
  const byQueue = new Map<string, string[]>();
  for (const k of keys) byQueue.set(k.queue, [...(byQueue.get(k.queue) ?? []), k.key]);
  for (const [queue, ckeys] of byQueue) {
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

interface WaitRow {
  queue: string;
  ckey: string;
  at: string;
  seq: number;
  id: string;
}

/**
 * Admitted laneless items of these keys ended (`admit` of each; 0 when a
 * limit was raised): under each key's row lock, its earliest-due waiting
 * items take the slots that are free now, and the key counts what it holds.
 * Call it in the transaction that ended them. The row lock comes first, so
 * hand-ons and admissions of one key take turns, and a waiting item is
 * admitted once.
 *
 * In two round trips on a pipelined transaction. The first, with
 * `alongside` (e.g. the completion that ended them, whose results `check`
 * sees before anything is written), locks the keys, gives up the ended
 * slots, and reads as many waiting items per key as slots ended: a key at
 * its limit, the usual case, has exactly those free. The second admits
 * them and counts them held. Only a key with more room than that (a limit
 * raised) reads again, and a waiting item cancelled meanwhile costs a third.
 */
export async function handOnKeys(
  send: Send,
  t: LedgerTables,
  ended: readonly KeyCount[],
  alongside: readonly RawBuilder<unknown>[] = [],
  check?: (results: readonly StatementResult[]) => void,
  claimFor?: SuccessorClaim,
): Promise<ClaimedItem[]> {
  const claimed: ClaimedItem[] = [];
  const keys = mergeCounts(ended);
  const freed = keys.filter((k) => k.admit > 0);
  const guess = freed.map((k) => ({ k, take: Math.min(MAX_ADMIT, k.admit) }));
  const first = await send([
    ...alongside,
    ...(keys.length > 0 ? [lockKeys(t, keys), limitsRead(t, keys)] : []),
    ...(freed.length > 0 ? [giveUpSlots(t, freed), readWaiting(t, guess)] : []),
  ]);
  check?.(first.slice(0, alongside.length));
  if (keys.length === 0) return claimed;
  const [locked, limitRows, , guessed] = first.slice(alongside.length) as [StatementResult, StatementResult, StatementResult?, StatementResult?];
  const limits = keyLimits(limitRows.rows);
  /** What each key's row counts, as this transaction last wrote it. */
  const held = new Map<string, number>();
  for (const r of locked.rows) {
    const k = queueScoped(String(r.queue), String(r.ckey));
    const gone = keys.find((x) => queueScoped(x.queue, x.key) === k)?.admit ?? 0;
    held.set(k, Math.max(0, Number(r.admitted) - gone));
  }
  let readAhead = (guessed?.rows ?? []) as unknown as WaitRow[];
  for (let round = 0; round < 4; round++) {
    const wants = keys
      .map((k) => {
        const now = held.get(queueScoped(k.queue, k.key));
        const free = now === undefined ? 0 : (limits.get(limitScope(k)) ?? UNLIMITED) - now;
        return { k, take: Math.min(MAX_ADMIT, Math.max(0, free)) };
      })
      .filter((w) => w.take > 0);
    const ahead = round === 0 ? fromReadAhead(wants, guess, readAhead) : undefined;
    readAhead = [];
    const waiting = ahead ?? (wants.length === 0 ? [] : ((await send([readWaiting(t, wants)]))[0]?.rows as unknown as WaitRow[]));
    if (waiting.length === 0) break;
    const ids = waiting.map((w) => w.id);
    // Key affinity: the completing consumer's room takes the first of them claimed, as a lane's successor is.
    const room = claimFor ? Math.max(0, claimFor.max - claimed.length) : 0;
    const lease = claimFor && room > 0 ? grantLease(claimFor) : undefined;
    const taken = lease && claimFor ? ids.slice(0, room) : [];
    const perKey = countPerKey(waiting);
    const results = await send([
      ...(lease && claimFor ? [claimAdmitted(t, taken, lease, claimFor), readBackClaimed(t, taken, lease.token)] : []),
      admitWaiting(t, ids),
      leaveLine(t, waiting),
      // Counted as if all were admitted: a waiting item cancelled meanwhile is uncounted below.
      addHeld(t, perKey),
    ]);
    if (lease) claimed.push(...claimedItems((results[1]?.rows ?? []) as unknown as ClaimedRow[], lease));
    const set = (lease ? (results[0]?.affected ?? 0) : 0) + (results[lease ? 2 : 0]?.affected ?? 0);
    for (const d of perKey) held.set(queueScoped(d.queue, d.key), (held.get(queueScoped(d.queue, d.key)) ?? 0) + d.n);
    if (set === ids.length) break;
    // Admitted: made heads now, left pending or claimed for the completing consumer; one cancelled meanwhile is neither.
    const [heads] = await send([sql`SELECT id FROM ${t.items} WHERE id IN (${list(ids)}) AND is_head = 1 AND state IN ('pending', 'processing')`]);
    const admitted = new Set((heads?.rows ?? []).map((x) => String(x.id)));
    const passedOver = countPerKey(waiting.filter((w) => !admitted.has(w.id)));
    for (const d of passedOver) held.set(queueScoped(d.queue, d.key), (held.get(queueScoped(d.queue, d.key)) ?? 0) - d.n);
    if (passedOver.length > 0) await send([addHeld(t, passedOver.map((d) => ({ ...d, n: -d.n })))]);
    // A waiting item cancelled meanwhile was passed over: its key looks again, once its slots are not all taken.
    const short = wants.some((w) => {
      const read = waiting.filter((x) => x.queue === w.k.queue && x.ckey === w.k.key);
      return read.length === w.take && read.some((x) => !admitted.has(x.id));
    });
    if (!short) break;
  }
  return claimed;
}

/**
 * The waiting items the first round trip read ahead, when they are all the
 * keys want: per key, either as many as it has free, or its whole line.
 * Undefined when some key has room beyond what was read (it reads again).
 */
function fromReadAhead(wants: readonly { k: KeyCount; take: number }[], guess: readonly { k: KeyCount; take: number }[], rows: readonly WaitRow[]): WaitRow[] | undefined {
  const out: WaitRow[] = [];
  for (const w of wants) {
    const g = guess.find((x) => x.k.queue === w.k.queue && x.k.key === w.k.key);
    const line = rows.filter((r) => r.queue === w.k.queue && r.ckey === w.k.key).sort(byPlace);
    if (g === undefined || (w.take > g.take && line.length === g.take)) return undefined;
    out.push(...line.slice(0, w.take));
  }
  return out;
}

function byPlace(a: WaitRow, b: WaitRow): number {
  return a.at < b.at ? -1 : a.at > b.at ? 1 : Number(a.seq) - Number(b.seq) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

interface KeyDelta {
  queue: string;
  key: string;
  n: number;
}

/** How many of `rows` each key has. */
function countPerKey(rows: readonly WaitRow[]): KeyDelta[] {
  const m = new Map<string, KeyDelta>();
  for (const r of rows) {
    const k = queueScoped(r.queue, r.ckey);
    const d = m.get(k);
    if (d) d.n++;
    else m.set(k, { queue: r.queue, key: r.ckey, n: 1 });
  }
  return [...m.values()];
}

/** Admitted and claimed at once under the completing consumer's lease, if due and of the classes and types it takes. */
function claimAdmitted(t: LedgerTables, ids: readonly string[], lease: Lease, next: SuccessorClaim): RawBuilder<unknown> {
  const classes = next.classes && next.classes.length > 0 ? sql` AND queue_class IN (${list(next.classes)})` : sql``;
  const types = next.types && next.types.length > 0 ? sql` AND type IN (${list(next.types)})` : sql``;
  return sql`UPDATE ${t.items} SET is_head = 1, ${leaseAssignments(lease)}
    WHERE id IN (${list(ids)}) AND state = 'pending' AND is_head = 0 AND run_after <= NOW(6)${classes}${types}`;
}

function lockKeys(t: LedgerTables, keys: readonly KeyCount[]): RawBuilder<unknown> {
  return sql`SELECT queue, ckey, admitted FROM ${t.keys} WHERE (queue, ckey) IN (${keyIn(keys)}) ORDER BY queue, ckey FOR UPDATE`;
}

/** The ended items' slots are free: each key counts `admit` fewer (never below 0). */
function giveUpSlots(t: LedgerTables, keys: readonly KeyCount[]): RawBuilder<unknown> {
  const cases = sql.join(
    keys.map((k) => sql`WHEN queue = ${inline(k.queue)} AND ckey = ${inline(k.key)} THEN ${inline(k.admit)}`),
    sql` `,
  );
  return sql`UPDATE ${t.keys} SET admitted = GREATEST(admitted - CASE ${cases} ELSE 0 END, 0) WHERE (queue, ckey) IN (${keyIn(keys)})`;
}

/** Each key counts `n` more admitted items (fewer, when negative). */
function addHeld(t: LedgerTables, deltas: readonly KeyDelta[]): RawBuilder<unknown> {
  const cases = sql.join(
    deltas.map((d) => sql`WHEN queue = ${inline(d.queue)} AND ckey = ${inline(d.key)} THEN ${inline(d.n)}`),
    sql` `,
  );
  const keys = sql.raw(deltas.map((d) => `(${literal(d.queue)}, ${literal(d.key)})`).join(', '));
  return sql`UPDATE ${t.keys} SET admitted = admitted + CASE ${cases} ELSE 0 END WHERE (queue, ckey) IN (${keys})`;
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

/** Each key's earliest-due waiting items, up to its free slots: one ordered range of key_waits each. */
function readWaiting(t: LedgerTables, wants: readonly { k: KeyCount; take: number }[]): RawBuilder<unknown> {
  const parts = wants.map(
    (w) => sql`(SELECT queue, ckey, DATE_FORMAT(run_after, '%Y-%m-%d %H:%i:%s.%f') AS at, seq, id FROM ${t.keyWaits}
      WHERE queue = ${inline(w.k.queue)} AND ckey = ${inline(w.k.key)} ORDER BY run_after, seq, id LIMIT ${inline(w.take)})`,
  );
  return sql`${sql.join(parts, sql` UNION ALL `)}`;
}

/** The waiting items become heads (one cancelled meanwhile does not). */
function admitWaiting(t: LedgerTables, ids: readonly string[]): RawBuilder<unknown> {
  return sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6) WHERE id IN (${list(ids)}) AND state = 'pending' AND is_head = 0`;
}

/** The items read from their keys' lines leave them, admitted or passed over. */
function leaveLine(t: LedgerTables, waiting: readonly WaitRow[]): RawBuilder<unknown> {
  const places = waiting.map((w) => `(${literal(w.queue)}, ${literal(w.ckey)}, ${literal(w.at)}, ${literal(Number(w.seq))}, ${literal(w.id)})`).join(', ');
  return sql`DELETE FROM ${t.keyWaits} WHERE (queue, ckey, run_after, seq, id) IN (${sql.raw(places)})`;
}
