import { sql, type RawBuilder } from 'kysely';
import type { LedgerTables } from '../../tables.js';
import { leaseValues } from '../claim/claimed.js';
import { storedKey } from '../keys/scope.js';
import { jsonLiteral, literal, NO_TIME_TEXT, nowPlusMsText } from '../common/fragments.js';
import type { NewItem } from './new-item.js';

/**
 * The columns a batch's INSERT names only when one of its items has a value:
 * a producer of this build then still enqueues on the schema before each
 * (concurrency keys: 8, trace context: 9) as long as it uses neither.
 */
export interface OptionalColumns {
  keyed: boolean;
  traced: boolean;
  /**
   * An item has an idempotency key, and so a request digest (schema 13): set by insertItems, the only path that writes
   * keys.
   */
  digested?: boolean;
  /** An item is a workflow's job (schema 17). */
  workflow?: boolean;
}

export function optionalColumns(items: readonly NewItem[]): OptionalColumns {
  return {
    keyed: items.some((i) => i.concurrencyKey !== null),
    traced: items.some((i) => i.traceparent !== null),
    workflow: items.some((i) => i.workflowId !== undefined),
  };
}

/** The optional columns' names, as the INSERT lists them (after is_head). */
export function optionalColumnNames(c: OptionalColumns): string {
  return `${c.keyed ? 'concurrency_key, ' : ''}${c.traced ? 'traceparent, ' : ''}${
    c.digested === true ? 'request_digest, ' : ''
  }${c.workflow === true ? 'workflow_id, ' : ''}`;
}

export function expectInserted(inserted: number, expected: number): void {
  if (inserted !== expected) throw new Error(`enqueue: inserted ${inserted} of ${expected} rows`);
}

export function insertStatement(
  t: LedgerTables,
  values: readonly RawBuilder<unknown>[],
  columns: OptionalColumns,
): RawBuilder<unknown> {
  return sql`INSERT INTO ${t.items} (id, queue, type, lane, lane_seq, is_head, ${sql.raw(
    optionalColumnNames(columns),
  )}queue_class, priority,
      payload, state, run_after, attempt, max_attempts, idempotency_key, replay_of, created_at, updated_at,
      lease_owner, lease_token, lease_until, started_at)
    VALUES ${sql.join(values)}`;
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
  const workflow = columns.workflow === true ? `${literal(item.workflowId ?? null)}, ` : '';
  const head = `(${literal(id)}, ${literal(item.queue)}, ${literal(item.type)}, ${literal(item.lane)}, ${literal(
    laneSeq,
  )}, ${isHead ? 1 : 0}, ${columns.keyed ? `${literal(storedKey(item))}, ` : ''}${
    columns.traced ? `${literal(item.traceparent)}, ` : ''
  }${digested}${workflow}${literal(item.queueClass)}, ${literal(item.priority)}, ${jsonLiteral(item.payloadJson)}, ${
    c ? c.state : "'pending'"
  }, `;
  const lease = c ? `${c.leaseOwner}, ${c.leaseToken}, ${c.leaseUntil}, ${c.startedAt}` : NO_LEASE;
  const tail = `, ${c ? 1 : 0}, ${literal(item.maxAttempts)}, ${literal(item.idempotencyKey)}, ${literal(
    item.replayOf ?? null,
  )}, NOW(6), NOW(6), ${lease})`;
  return item.runAt !== null
    ? sql`${sql.raw(head)}${item.runAt}${sql.raw(tail)}`
    : sql.raw(head + nowPlusMsText(item.delayMs) + tail);
}
