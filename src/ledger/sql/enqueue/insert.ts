import { sql, type RawBuilder } from 'kysely';
import { newItemId, type IdOrder } from '../../ids.js';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { EnqueueResult } from '../../types.js';
import { waitRowsFor } from '../keys/key-waits.js';
import { IdempotencyConflictError } from '../../../errors.js';
import { requestDigest } from '../../request-digest.js';
import { affected, queueScoped } from '../common/fragments.js';
import type { NewItem } from './new-item.js';
import { type OptionalColumns, expectInserted, insertStatement, valuesRow } from './insert-statement.js';
import { type KeyAdmission, admitKeyed } from './admit-keyed.js';
import { assignLaneSequences, nullableNumber, type LaneSequence } from './lane-sequences.js';
import { optionalColumns } from './insert-statement.js';

/** Keeps one multi-row INSERT well under max_allowed_packet. */
export const MAX_STATEMENT_BYTES = 4 * 1024 * 1024;

/**
 * An upper bound on an item's share of an INSERT: its payload as `jsonLiteral` writes it (as hex when it holds a
 * backslash), plus the other columns.
 */
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
      SELECT id, queue, idempotency_key, lane_seq, ${
        keys.digests ? sql`LOWER(HEX(request_digest))` : sql`NULL`
      } AS digest FROM ${t.items}
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
    const row = freshRow(seqs[i] ?? admitted[i], idOrder, f.item.waiting === true);
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

export function conflict(
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

/** A new item's id and lane place (a keyed item: whether it was admitted); an item with neither is its own head. */
function freshRow(
  s: LaneSequence | KeyAdmission | undefined,
  idOrder: IdOrder,
  waiting: boolean,
): { id: string; laneSeq: number | null; isHead: boolean } {
  // A workflow's job with dependencies is not its own head until they settle (sql/workflows/settle.ts).
  const isHead = !waiting && (s?.head ?? true);
  return { id: newItemId(idOrder), laneSeq: s !== undefined && 'seq' in s ? s.seq : null, isHead };
}
