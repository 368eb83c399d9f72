import { sql, type RawBuilder } from 'kysely';
import { newItemId, type IdOrder } from '../../ids.js';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { ClaimedItem, EnqueueResult, KeyScope, QueueClass } from '../../types.js';
import { claimedItem, leaseValues, type Lease } from '../claim/claimed.js';
import { admitStatement, admittedKeys, grantedByKey, grantedRead, waitRowsFor } from '../keys/admission.js';
import { storedKey, type KeyRule } from '../keys/scope.js';
import { IdempotencyConflictError } from '../../../errors.js';
import { requestDigest } from '../../request-digest.js';
import {
  affected,
  byteOrder,
  jsonLiteral,
  laneIn,
  literal,
  NO_TIME_TEXT,
  nowPlusMsText,
  queueScoped,
} from '../common/fragments.js';

/** An item ready to insert: validated, payload already JSON text. */
export interface NewItem {
  queue: string;
  type: string;
  payloadJson: string;
  lane: string | null;
  concurrencyKey: string | null;
  /** Whose limit admits it, once the enqueue has read the type limits (sql/keys/scope.ts). */
  keyScope?: KeyScope;
  /** That limit, and its queue's fairness, as read then. */
  keyRule?: KeyRule;
  priority: number;
  queueClass: QueueClass;
  maxAttempts: number;
  runAt: Date | null;
  delayMs: number;
  idempotencyKey: string | null;
  replayOf?: string | null;
  /** The W3C traceparent of the span that enqueued it (src/tracing/publish.ts), or null. */
  traceparent: string | null;
  /** Insert it already claimed under this lease (a consumer in the producer's process takes it at once). */
  claim?: Lease;
}

/** A lease asked for at insert: the item starts `processing`, attempt 1, held by `owner` with `token`. */
export interface InsertClaim {
  owner: string;
  token: string;
  leaseMs: number;
}

/**
 * Whether an item may be offered a claim at insert: due now, nothing to
 * resolve first. A laned item keeps the claim only if the insert finds its
 * lane idle (it is the head); otherwise it waits for its turn as usual.
 */
export function claimableAtInsert(item: NewItem): boolean {
  return item.runAt === null && item.delayMs === 0 && item.idempotencyKey === null && (item.replayOf ?? null) === null;
}

/**
 * The claimed item as `insertItems` wrote it, for the consumer that holds
 * its lease: the row the claim's read-back would return, built from the
 * item. Times are this process's clock (the row has the ledger's).
 */
export function claimedAtInsert(
  id: string,
  item: NewItem,
  lease: Lease,
  nowMs: number,
  laneSeq: number | null,
): ClaimedItem {
  const now = new Date(nowMs);
  return claimedItem(
    {
      id,
      queue: item.queue,
      type: item.type,
      lane: item.lane,
      lane_seq: laneSeq,
      concurrency_key: storedKey(item),
      queue_class: item.queueClass,
      priority: item.priority,
      payload: item.payloadJson,
      run_after: now,
      attempt: 1,
      max_attempts: item.maxAttempts,
      idempotency_key: item.idempotencyKey,
      dependency_key: null,
      probe_after: null,
      blocked_at: null,
      block_expires_at: null,
      checkpoint: null,
      progress: null,
      result: null,
      last_error: null,
      failure_class: null,
      replay_of: item.replayOf ?? null,
      replayed_at: null,
      traceparent: item.traceparent,
      created_at: now,
      started_at: now,
    },
    lease,
  );
}

/** Keeps one multi-row INSERT well under max_allowed_packet. */
export const MAX_STATEMENT_BYTES = 4 * 1024 * 1024;

/** An upper bound on an item's share of an INSERT: its payload as `jsonLiteral` writes it (as hex when it holds a backslash), plus the other columns. */
function rowBytes(item: NewItem): number {
  return item.payloadJson.length * (item.payloadJson.includes('\\') ? 6 : 3) + 512;
}

/** The items fit one multi-row INSERT (MAX_STATEMENT_BYTES). */
export function fitsOneStatement(items: readonly NewItem[]): boolean {
  let bytes = 0;
  for (const i of items) bytes += rowBytes(i);
  return bytes <= MAX_STATEMENT_BYTES;
}

/**
 * Inserts a batch: resolves idempotency keys, assigns lane sequences under
 * the lane rows' locks, then one multi-row INSERT. Must run inside a
 * transaction. On a duplicate-key race (1062: another transaction committed
 * the key first) the caller rolls back (to a savepoint) and runs it again
 * with `keysFrom`, a connection outside that transaction (the ledger's pool:
 * autocommit, READ COMMITTED), where existing keys are then looked up: it
 * sees the committed winner whatever the transaction's isolation, and takes
 * no lock. A locking re-read inside the transaction would ask for an
 * exclusive lock on the key that every loser of the race already holds
 * shared from its duplicate insert: several losers deadlock. `false`: look
 * keys up in `exec`.
 */
export async function insertItems(
  exec: Executor,
  t: LedgerTables,
  items: readonly NewItem[],
  keysFrom: Executor | false,
  idOrder: IdOrder,
  keys: KeyCheck = { batch: true, digests: true },
): Promise<EnqueueResult[]> {
  const results: (EnqueueResult | undefined)[] = new Array(items.length);
  const firstByKey = new Map<string, number>();
  const keyed: NewItem[] = [];
  items.forEach((item, index) => {
    if (item.idempotencyKey === null) return;
    const k = queueScoped(item.queue, item.idempotencyKey);
    if (!firstByKey.has(k)) {
      firstByKey.set(k, index);
      keyed.push(item);
    }
  });

  const existing = new Map<string, KeyedRow>();
  if (keyed.length > 0) {
    const pairs = sql.join(keyed.map((i) => sql`(${i.queue}, ${i.idempotencyKey})`));
    const rows = await sql<KeyedRow>`
      SELECT id, queue, idempotency_key, lane_seq, ${keys.digests ? sql`LOWER(HEX(request_digest))` : sql`NULL`} AS digest FROM ${t.items}
      WHERE (queue, idempotency_key) IN (${pairs})`.execute(keysFrom === false ? exec : keysFrom);
    for (const r of rows.rows) existing.set(queueScoped(r.queue, r.idempotency_key), r);
  }

  // Every key's request is checked before anything is written: a conflict refuses the whole batch.
  const digests = items.map((item) => (item.idempotencyKey === null || !keys.digests ? null : requestDigest(item)));
  const fresh: { index: number; item: NewItem }[] = [];
  items.forEach((item, index) => {
    if (item.idempotencyKey !== null) {
      const k = queueScoped(item.queue, item.idempotencyKey);
      const found = existing.get(k);
      const first = firstByKey.get(k) ?? index;
      if (found) {
        // An item stored before schema 13 has no digest: a duplicate, as it always was.
        if (found.digest !== null && found.digest !== digests[index]) throw conflict(item, found.id, index, keys.batch);
        results[index] = { id: found.id, duplicate: true, laneSeq: nullableNumber(found.lane_seq) };
        return;
      }
      if (first !== index) {
        if (digests[first] !== digests[index]) throw conflict(item, null, index, keys.batch, first);
        return; // a repeat inside this batch: resolved below
      }
    }
    fresh.push({ index, item });
  });

  const seqs = await assignLaneSequences(
    exec,
    t,
    fresh.map((f) => f.item),
  );
  const admitted = await admitKeyed(
    exec,
    t,
    fresh.map((f) => f.item),
  );
  const rows = fresh.map((f, i) => {
    const row = freshRow(seqs[i] ?? admitted[i], idOrder);
    results[f.index] = { id: row.id, duplicate: false, laneSeq: row.laneSeq };
    return { ...row, item: f.item, index: f.index };
  });

  const columns = {
    ...optionalColumns(rows.map((r) => r.item)),
    digested: keys.digests && rows.some((r) => r.item.idempotencyKey !== null),
  };
  let chunk: RawBuilder<unknown>[] = [];
  let bytes = 0;
  for (const row of rows) {
    const size = rowBytes(row.item);
    if (chunk.length > 0 && bytes + size > MAX_STATEMENT_BYTES) {
      await insertChunk(exec, t, chunk, chunk.length, columns);
      chunk = [];
      bytes = 0;
    }
    chunk.push(valuesRow(row.id, row.item, row.laneSeq, row.isHead, columns, digests[row.index] ?? null));
    bytes += size;
  }
  if (chunk.length > 0) await insertChunk(exec, t, chunk, chunk.length, columns);
  const waiting = rows.filter((r) => r.item.concurrencyKey !== null && !r.isHead).map((r) => r.id);
  if (waiting.length > 0) await waitRowsFor(t, waiting).execute(exec);

  items.forEach((item, index) => {
    if (results[index] !== undefined || item.idempotencyKey === null) return;
    const first = results[firstByKey.get(queueScoped(item.queue, item.idempotencyKey)) ?? -1];
    if (first) results[index] = { ...first, duplicate: true };
  });
  return results.map((r, i) => {
    if (!r) throw new Error(`enqueue: no result for item ${i}`);
    return r;
  });
}

/**
 * How `insertItems` checks idempotency keys: `digests`, whether the ledger
 * stores request digests (schema 13; without them a repeated key is a
 * duplicate whatever its request); `batch`, whether a refusal names the
 * item's index (enqueueMany) or not (a single enqueue).
 */
export interface KeyCheck {
  batch: boolean;
  digests: boolean;
}

/** An item an idempotency key of the batch already names; `digest` (hex) is null for one stored before schema 13. */
interface KeyedRow {
  id: string;
  queue: string;
  idempotency_key: string;
  lane_seq: number | null;
  digest: string | null;
}

function conflict(
  item: NewItem,
  itemId: string | null,
  index: number,
  batch: boolean,
  earlierIndex?: number,
): IdempotencyConflictError {
  return new IdempotencyConflictError(
    item.queue,
    item.idempotencyKey ?? '',
    itemId,
    batch ? index : undefined,
    earlierIndex,
  );
}

async function insertChunk(
  exec: Executor,
  t: LedgerTables,
  values: RawBuilder<unknown>[],
  expected: number,
  columns: OptionalColumns,
): Promise<void> {
  expectInserted(affected(await insertStatement(t, values, columns).execute(exec)), expected);
}

/**
 * The columns a batch's INSERT names only when one of its items has a value:
 * a producer of this build then still enqueues on the schema before each
 * (concurrency keys: 8, trace context: 9) as long as it uses neither.
 */
export interface OptionalColumns {
  keyed: boolean;
  traced: boolean;
  /** An item has an idempotency key, and so a request digest (schema 13): set by insertItems, the only path that writes keys. */
  digested?: boolean;
}

export function optionalColumns(items: readonly NewItem[]): OptionalColumns {
  return { keyed: items.some((i) => i.concurrencyKey !== null), traced: items.some((i) => i.traceparent !== null) };
}

/** The optional columns' names, as the INSERT lists them (after is_head). */
export function optionalColumnNames(c: OptionalColumns): string {
  return `${c.keyed ? 'concurrency_key, ' : ''}${c.traced ? 'traceparent, ' : ''}${c.digested === true ? 'request_digest, ' : ''}`;
}

export function expectInserted(inserted: number, expected: number): void {
  if (inserted !== expected) throw new Error(`enqueue: inserted ${inserted} of ${expected} rows`);
}

export function insertStatement(
  t: LedgerTables,
  values: readonly RawBuilder<unknown>[],
  columns: OptionalColumns,
): RawBuilder<unknown> {
  return sql`INSERT INTO ${t.items} (id, queue, type, lane, lane_seq, is_head, ${sql.raw(optionalColumnNames(columns))}queue_class, priority,
      payload, state, run_after, attempt, max_attempts, idempotency_key, replay_of, created_at, updated_at,
      lease_owner, lease_token, lease_until, started_at)
    VALUES ${sql.join(values)}`;
}

type LaneSequence = { seq: number; head: boolean };

/** A new item's id and lane place (a keyed item: whether it was admitted); an item with neither is its own head. */
function freshRow(
  s: LaneSequence | KeyAdmission | undefined,
  idOrder: IdOrder,
): { id: string; laneSeq: number | null; isHead: boolean } {
  return { id: newItemId(idOrder), laneSeq: s !== undefined && 'seq' in s ? s.seq : null, isHead: s?.head ?? true };
}

export type KeyAdmission = { head: boolean };

/** Each keyed item's priority as enqueued, before a fair queue's round raised it. */
const givenPriority = new WeakMap<NewItem, number>();

/**
 * Admits the keyed items and deals their rounds (sql/keys/admission.ts): the
 * key rows are upserted (locking them) and read back. The first `granted`
 * laneless items of each key in the batch are heads; one that is not loses
 * any claim it was offered. In a fair queue each keyed item's priority is
 * raised by its round. A laned item keeps the place its lane gave it.
 */
async function admitKeyed(
  exec: Executor,
  t: LedgerTables,
  items: readonly NewItem[],
): Promise<(KeyAdmission | undefined)[]> {
  const keys = await admittedKeys(exec, t, items);
  if (keys.length === 0) return items.map(() => undefined);
  await admitStatement(t, keys).execute(exec);
  return admissionsOf(items, (await grantedRead(t, keys).execute(exec)).rows as Record<string, unknown>[]);
}

/**
 * What the admission granted each keyed item, from the key rows' read-back
 * (grantedRead): the first `granted` laneless items of each key in the
 * batch are heads; one that is not loses any claim it was offered. In a
 * fair queue each keyed item's priority is raised by its round. A laned
 * item keeps the place its lane gave it (undefined, as an item without a key).
 */
export function admissionsOf(
  items: readonly NewItem[],
  grantedRows: readonly Record<string, unknown>[],
): (KeyAdmission | undefined)[] {
  const granted = grantedByKey(grantedRows);
  const seen = new Map<string, { all: number; laneless: number }>();
  return items.map((item) => {
    const key = storedKey(item);
    if (key === null) return undefined;
    const k = queueScoped(item.queue, key);
    const place = seen.get(k) ?? { all: 0, laneless: 0 };
    place.all++;
    if (item.lane === null) place.laneless++;
    seen.set(k, place);
    const g = granted.get(k);
    if (g?.roundFrom !== null && g?.roundFrom !== undefined) {
      // From the priority it was given: a transaction run again after a conflict deals the rounds again.
      const base = givenPriority.get(item) ?? item.priority;
      givenPriority.set(item, base);
      item.priority = base + g.roundFrom + place.all - 1;
    }
    if (item.lane !== null) return undefined;
    const head = place.laneless <= (g?.granted ?? 0);
    if (!head) delete item.claim;
    return { head };
  });
}

/** The lease columns of an item inserted unclaimed: fixed-width "none" values (schema 2). */
const NO_LEASE = `'', '', ${NO_TIME_TEXT}, ${NO_TIME_TEXT}`;

/**
 * One row of the INSERT. Strings and numbers go in as literals (`literal`,
 * which no sql_mode misreads): a batch of a thousand items
 * was twenty thousand parameters, and compiling and substituting them cost
 * a quarter of an enqueue's CPU. A `runAt` instant stays a parameter, so the
 * connection's time zone setting renders it as before.
 */
export function valuesRow(
  id: string,
  item: NewItem,
  laneSeq: number | null,
  isHead: boolean,
  columns: OptionalColumns,
  digest: string | null = null,
): RawBuilder<unknown> {
  // A claimed insert is the claim CAS's outcome written directly: processing, attempt 1, leased.
  const c = item.claim ? leaseValues(item.claim) : undefined;
  const digested = columns.digested === true ? `${digest === null ? 'NULL' : `X'${digest}'`}, ` : '';
  const head = `(${literal(id)}, ${literal(item.queue)}, ${literal(item.type)}, ${literal(item.lane)}, ${literal(laneSeq)}, ${isHead ? 1 : 0}, ${columns.keyed ? `${literal(storedKey(item))}, ` : ''}${columns.traced ? `${literal(item.traceparent)}, ` : ''}${digested}${literal(item.queueClass)}, ${literal(item.priority)}, ${jsonLiteral(item.payloadJson)}, ${c ? c.state : "'pending'"}, `;
  const lease = c ? `${c.leaseOwner}, ${c.leaseToken}, ${c.leaseUntil}, ${c.startedAt}` : NO_LEASE;
  const tail = `, ${c ? 1 : 0}, ${literal(item.maxAttempts)}, ${literal(item.idempotencyKey)}, ${literal(item.replayOf ?? null)}, NOW(6), NOW(6), ${lease})`;
  return item.runAt !== null
    ? sql`${sql.raw(head)}${item.runAt}${sql.raw(tail)}`
    : sql.raw(head + nowPlusMsText(item.delayMs) + tail);
}

export interface LaneCount {
  queue: string;
  lane: string;
  n: number;
}

/**
 * Per lane of the batch, how many of its items it carries; lanes sorted in
 * the order the lane rows' key is (the order a completion's UPDATE of
 * several lane rows locks them in), so enqueues and completions take lane
 * locks in one order.
 */
export function laneCounts(items: readonly NewItem[]): LaneCount[] {
  const counts = new Map<string, LaneCount>();
  for (const item of items) {
    if (item.lane === null) continue;
    const k = queueScoped(item.queue, item.lane);
    const c = counts.get(k);
    if (c) c.n++;
    else counts.set(k, { queue: item.queue, lane: item.lane, n: 1 });
  }
  return [...counts.values()].sort((a, b) =>
    a.queue < b.queue ? -1 : a.queue > b.queue ? 1 : byteOrder(a.lane, b.lane),
  );
}

/**
 * Lane rows per upsert statement. On TiDB in pessimistic mode a statement
 * whose lock meets a newer commit on one of its keys runs again, whole: an
 * upsert of 1,000 lane rows while completions kept committing to those lanes
 * ran 20–33 times (4–7 s, the slow log's Exec_retry_count). A statement per
 * 32 lanes meets fewer commits and repeats less when it does; the statements
 * still travel in one round trip, in the same lane order.
 */
export const LANES_PER_UPSERT = 32;

/**
 * Reserves the batch's sequences on its lane rows (locking them), in
 * statements of LANES_PER_UPSERT lanes, then reads the rows back; no result
 * is needed between them. A lane that was idle (`busy_from = 0`) becomes
 * busy from the batch's first item of it, which is then its head. The new
 * counts come in as a derived table, so the update names them `v.…` rather
 * than VALUES(…), which MySQL 8.0.20+ deprecates and every server reads
 * alike. `busy_from` is assigned before `next_seq` and reads only the old
 * row: MySQL and MariaDB assign left to right, TiDB reads the old row in
 * every expression, and this means the same on all three.
 */
export function laneStatements(
  t: LedgerTables,
  lanes: readonly LaneCount[],
): { upserts: RawBuilder<unknown>[]; read: RawBuilder<unknown> } {
  const upserts: RawBuilder<unknown>[] = [];
  for (let i = 0; i < lanes.length; i += LANES_PER_UPSERT) {
    const rows = lanes
      .slice(i, i + LANES_PER_UPSERT)
      .map((l, k) =>
        k === 0
          ? sql`SELECT ${l.queue} AS queue, ${l.lane} AS lane, ${l.n} AS next_seq, 1 AS busy_from`
          : sql`SELECT ${l.queue}, ${l.lane}, ${l.n}, 1`,
      );
    upserts.push(sql`INSERT INTO ${t.lanes} (queue, lane, next_seq, busy_from)
    SELECT * FROM (${sql.join(rows, sql` UNION ALL `)}) AS v
    ON DUPLICATE KEY UPDATE busy_from = IF(${t.lanes}.busy_from = 0, ${t.lanes}.next_seq + 1, ${t.lanes}.busy_from),
      next_seq = ${t.lanes}.next_seq + v.next_seq`);
  }
  return { upserts, read: sql`SELECT queue, lane, next_seq, busy_from FROM ${t.lanes} WHERE ${laneIn(lanes)}` };
}

type LaneRow = { queue: string; lane: string; next_seq: number; busy_from: number };

/**
 * For every laned item, the next gap-free sequence of its lane and whether it
 * is the head: the item that made its lane busy. An item that is not its
 * lane's head loses any claim it was offered: it waits for its turn.
 */
function sequencesFrom(
  items: readonly NewItem[],
  lanes: readonly LaneCount[],
  rows: readonly LaneRow[],
): (LaneSequence | undefined)[] {
  const counts = new Map(lanes.map((l) => [queueScoped(l.queue, l.lane), l.n]));
  // Per lane: the next sequence of this batch, and the sequence that made the lane busy.
  const cursor = new Map<string, { next: number; busyFrom: number }>();
  for (const r of rows) {
    const n = counts.get(queueScoped(r.queue, r.lane));
    if (n === undefined) continue;
    cursor.set(queueScoped(r.queue, r.lane), { next: Number(r.next_seq) - n + 1, busyFrom: Number(r.busy_from) });
  }
  return items.map((item) => {
    if (item.lane === null) return undefined;
    const cur = cursor.get(queueScoped(item.queue, item.lane));
    if (!cur) throw new Error(`enqueue: lane row missing for ${item.queue}/${item.lane}`);
    const seq = cur.next++;
    const head = seq === cur.busyFrom;
    if (!head) delete item.claim;
    return { seq, head };
  });
}

async function assignLaneSequences(
  exec: Executor,
  t: LedgerTables,
  items: readonly NewItem[],
): Promise<(LaneSequence | undefined)[]> {
  const lanes = laneCounts(items);
  if (lanes.length === 0) return items.map(() => undefined);
  const { upserts, read } = laneStatements(t, lanes);
  for (const upsert of upserts) await upsert.execute(exec);
  const rows = await read.$castTo<LaneRow>().execute(exec);
  return sequencesFrom(items, lanes, rows.rows);
}

function nullableNumber(v: number | null): number | null {
  return v === null ? null : Number(v);
}
