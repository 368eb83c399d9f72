import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { LedgerDb } from '../../connection.js';
import { newItemId } from '../../ids.js';
import type { LedgerTables } from '../../tables.js';
import type { EnqueueResult } from '../../types.js';
import { leaseValues } from '../claim/claimed.js';
import { jsonLiteral, literal, NO_TIME_TEXT, nowPlusMsText, queueScoped } from '../common/fragments.js';
import { expectInserted, optionalColumnNames, optionalColumns, type OptionalColumns } from './insert-statement.js';
import { laneCounts, laneStatements, type LaneCount } from './lane-sequences.js';
import type { NewItem } from './new-item.js';
import { admitStatement, admittedKeys } from '../keys/admission.js';
import { waitRowsFor } from '../keys/key-waits.js';
import { storedKey } from '../keys/scope.js';
import { retryPipelined } from '../common/pipeline.js';

/** What the read-back says of an inserted item. */
interface InsertedRow {
  id: string;
  lane_seq: number | string | null;
  state: string;
  priority: number;
}

/**
 * A batch with lanes and without idempotency keys, in one round trip on a
 * connection that takes several statements per query: the lane rows reserve
 * the batch's sequences (and lock the lanes; see LANES_PER_UPSERT), an `INSERT … SELECT` joins
 * each item to its lane row to compute its sequence and whether it is the
 * head (and so keeps a claim it was offered), a read-back by the new ids
 * says what was written, and COMMIT. The sequences never come to the client
 * before the insert, so the lanes are held for one round trip, not two.
 */
export async function insertLanedOneTrip(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  items: readonly NewItem[],
): Promise<EnqueueResult[]> {
  const lanes = laneCounts(items);
  const ids = items.map(() => newItemId(caps.idOrder));
  const { upserts } = laneStatements(t, lanes);
  const waiting = ids.filter((_, i) => items[i]!.concurrencyKey !== null);
  const after = waiting.length === 0 ? [] : [waitRowsFor(t, waiting)];
  return retryPipelined(db, caps, async (send, exec) => {
    const before = waiting.length === 0 ? upserts : [...upserts, admitStatement(t, await admittedKeys(exec, t, items))];
    const results = await send(
      [...before, insertJoined(t, items, ids, lanes, optionalColumns(items)), ...after, readBack(t, ids)],
      { commit: true },
    );
    const [inserted] = results.slice(before.length);
    const read = results[results.length - 1];
    expectInserted(inserted?.affected ?? 0, items.length);
    const byId = new Map(((read?.rows ?? []) as unknown as InsertedRow[]).map((r) => [r.id, r]));
    return items.map((item, i) => {
      const row = byId.get(ids[i]!);
      if (!row) throw new Error(`enqueue: item ${i} not read back`);
      // A laned item whose lane was busy is not the head: the claim it was offered does not hold.
      if (item.claim && row.state !== 'processing') delete item.claim;
      // A fair queue's round raised it.
      item.priority = Number(row.priority);
      return { id: row.id, duplicate: false, laneSeq: row.lane_seq === null ? null : Number(row.lane_seq) };
    });
  });
}

/**
 * The items as a derived table, each with its place in the batch's share of
 * its lane (`k` of `n`), joined to the lane rows the upsert just reserved
 * (`next_seq` already includes the batch): the item's sequence is
 * `next_seq - n + k`, and it is the head when it made its lane busy (its
 * sequence is the lane row's `busy_from`). A
 * laned item with no lane row would get a NULL `is_head`, which the NOT NULL
 * column refuses: the statement fails rather than insert it out of its lane.
 * The queue name is written as ASCII text, the lane rows' column's character
 * set: TiDB refuses to compare a derived table's utf8mb4 text with it.
 */
function insertJoined(
  t: LedgerTables,
  items: readonly NewItem[],
  ids: readonly string[],
  lanes: readonly LaneCount[],
  columns: OptionalColumns,
): RawBuilder<unknown> {
  const { keyed, traced } = columns;
  const seen = new Map<string, number>();
  const keySeen = new Map<string, number>();
  const roundSeen = new Map<string, number>();
  const counts = new Map(lanes.map((l) => [queueScoped(l.queue, l.lane), l.n]));
  const rows = items.map((item, i) => {
    const key = item.lane === null ? '' : queueScoped(item.queue, item.lane);
    // A laneless keyed item's `k` is its place among its key's laneless items of the batch: the first
    // `granted` are admitted. `r`: its place among all its key's items, its round in a fair queue.
    const stored = storedKey(item);
    const ck = stored === null ? '' : queueScoped(item.queue, stored);
    const k = item.lane !== null ? (seen.get(key) ?? 0) + 1 : stored !== null ? (keySeen.get(ck) ?? 0) + 1 : 1;
    if (item.lane !== null) seen.set(key, k);
    else if (stored !== null) keySeen.set(ck, k);
    const r = stored === null ? 1 : (roundSeen.get(ck) ?? 0) + 1;
    if (stored !== null) roundSeen.set(ck, r);
    const n = item.lane === null ? 1 : (counts.get(key) ?? 1);
    const c = item.claim ? leaseValues(item.claim) : undefined;
    const runAfter = item.runAt !== null ? sql`${item.runAt}` : sql.raw(nowPlusMsText(item.delayMs));
    const as = (name: string): string => (i === 0 ? ` AS ${name}` : '');
    return sql`SELECT ${sql.raw(
      `${literal(ids[i]!)}${as('id')}, _ascii${literal(item.queue)}${as('queue')}, ${literal(item.type)}${as(
        'type',
      )}, ${literal(item.lane)}${as('lane')}, ` +
        `${literal(stored)}${as('ckey')}, ${literal(item.traceparent)}${as('traceparent')}, ${r}${as('r')}, ` +
        `${k}${as('k')}, ${n}${as('n')}, ${literal(item.queueClass)}${as('queue_class')}, ${literal(item.priority)}${as(
          'priority',
        )}, ` +
        `${jsonLiteral(item.payloadJson)}${as('payload')}, `,
    )}${runAfter}${sql.raw(
      `${as('run_after')}, ${literal(item.maxAttempts)}${as('max_attempts')}, ${literal(item.replayOf ?? null)}${as(
        'replay_of',
      )}, ` +
        `${c ? 1 : 0}${as('c')}, ${c ? c.leaseOwner : "''"}${as('lease_owner')}, ${c ? c.leaseToken : "''"}${as(
          'lease_token',
        )}, ` +
        `${c ? c.leaseUntil : NO_TIME_TEXT}${as('lease_until')}`,
    )}`;
  });
  // Evaluated per row: whether the item is its lane's head, or admitted by its key; items with neither are their own
  // heads.
  const ownHead = keyed ? `IF(v.ckey IS NULL, 1, IF(kr.queue IS NULL, NULL, kr.granted >= v.k))` : '1';
  // In a fair queue a keyed item's priority is raised by its round.
  const priority = sql.raw(keyed ? `IF(kr.fair = 1, v.priority + kr.round_from + v.r - 1, v.priority)` : 'v.priority');
  const head = sql.raw(
    `IF(v.lane IS NULL, ${ownHead}, IF(l.queue IS NULL, NULL, l.busy_from = l.next_seq - v.n + v.k))`,
  );
  const claimed = sql`(v.c = 1 AND ${head} = 1)`;
  const keyJoin = keyed ? sql`LEFT JOIN ${t.keys} kr ON kr.queue = v.queue AND kr.ckey = v.ckey` : sql``;
  // The key and trace columns are named only when an item has a value (see OptionalColumns).
  return sql`INSERT INTO ${t.items} (id, queue, type, lane, lane_seq, is_head, ${sql.raw(
    optionalColumnNames(columns),
  )}queue_class, priority,
      payload, state, run_after, attempt, max_attempts, idempotency_key, replay_of, created_at, updated_at,
      lease_owner, lease_token, lease_until, started_at)
    SELECT v.id, v.queue, v.type, v.lane, IF(v.lane IS NULL, NULL, l.next_seq - v.n + v.k), ${head}, ${sql.raw(
      `${keyed ? 'v.ckey, ' : ''}${traced ? 'v.traceparent, ' : ''}`,
    )}v.queue_class, ${priority},
      v.payload, IF(${claimed}, 'processing', 'pending'), v.run_after, IF(${
        claimed
      }, 1, 0), v.max_attempts, NULL, v.replay_of,
      NOW(6), NOW(6), IF(${claimed}, v.lease_owner, ''), IF(${claimed}, v.lease_token, ''), IF(${
        claimed
      }, v.lease_until, ${sql.raw(NO_TIME_TEXT)}),
      IF(${claimed}, NOW(6), ${sql.raw(NO_TIME_TEXT)})
    FROM (${sql.join(rows, sql` UNION ALL `)}) AS v
    LEFT JOIN ${t.lanes} l ON l.queue = v.queue AND l.lane = v.lane ${keyJoin}`;
}

function readBack(t: LedgerTables, ids: readonly string[]): RawBuilder<unknown> {
  return sql`SELECT id, lane_seq, state, priority FROM ${t.items} WHERE id IN (${sql.raw(
    ids.map((id) => literal(id)).join(', '),
  )})`;
}
