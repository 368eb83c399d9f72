import { sql } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import { errorDigest } from '../../ids.js';
import { ER_DUP_ENTRY, errno, retryTransaction } from '../../retry.js';
import type { ItemRow } from '../../rows.js';
import type { LedgerTables } from '../../tables.js';
import { RepairRejectedError, type RepairRejection } from '../../../errors.js';
import type { QueueClass, RepairResult } from '../../types.js';
import { affected, ITEM_COLUMNS, NO_TIME } from '../common/fragments.js';
import type { NewItem } from '../enqueue/new-item.js';
import { admissionsOf } from '../enqueue/admit-keyed.js';
import { admittedKeys, admitStatement, grantedRead } from '../keys/admission.js';
import { waitRowsFor } from '../keys/key-waits.js';
import { givenKey, readKeyRules, scopeKeys, storedKey } from '../keys/scope.js';
import { insertHistory } from '../common/transition.js';

export interface RepairSpec {
  id: string;
  expectAttempt: number;
  expectErrorDigest: string;
  reason: string;
  actor: string;
  repairId: string;
}

/**
 * Operator repair in place (docs/design/states.md, Repair): a dead or cancelled
 * item goes back to pending as itself: the same id, lane place, idempotency
 * key, payload, checkpoint and durable steps, with a fresh attempt budget.
 * Guarded, like replay, by what the operator saw (the attempt count and the
 * digest of the last error); the repair is a history row whose id is the
 * repair id, with the reason and the actor.
 *
 * Lane order: the repaired item takes its place back. When no unfinished
 * item of its lane comes before it, it is the lane's head again and the
 * lane's pending head steps back behind it; when its lane's head is running
 * or blocked it cannot, and the repair is refused (`lane_busy`) rather than
 * run two items of a lane at once. When an earlier item is still unfinished,
 * it waits its turn as any item does. Items of its lane that completed
 * after it died stay completed.
 */
export async function repairItem(db: LedgerDb, t: LedgerTables, spec: RepairSpec): Promise<RepairResult> {
  return retryTransaction(
    db,
    async (trx) => {
      const rows = await sql<ItemRow>`SELECT ${ITEM_COLUMNS} FROM ${t.items} WHERE id = ${spec.id} FOR UPDATE`.execute(
        trx,
      );
      const row = rows.rows[0];
      const refused = whyRefused(row, spec);
      if (refused !== undefined) {
        // The same repair id again (an answer lost on the way back): it did happen.
        if (row && (await repairedBy(trx, t, spec)))
          return { id: spec.id, repairId: spec.repairId, duplicate: true, isHead: row.is_head === 1 };
        throw new RepairRejectedError(spec.id, refused);
      }
      const item = row!;
      const laneHead = item.lane === null ? true : await takeLanePlace(trx, t, item);
      const keyed = await readmitKey(trx, t, item);
      const isHead = item.lane === null ? (keyed?.head ?? true) : laneHead;
      const u =
        await sql`UPDATE ${t.items} SET state = 'pending', is_head = ${isHead ? 1 : 0}, attempt = 0, run_after = NOW(6),
          priority = ${keyed?.priority ?? item.priority}, concurrency_key = ${keyed?.stored ?? item.concurrency_key},
          last_error = NULL, failure_class = NULL, result = NULL, cancel_requested = 0, group_head = NULL,
          dependency_key = NULL, probe_after = NULL, blocked_at = NULL, block_expires_at = NULL,
          lease_token = '', lease_until = ${NO_TIME}, terminal_at = ${NO_TIME}, updated_at = NOW(6)
        WHERE id = ${spec.id} AND state = ${item.state} AND attempt = ${item.attempt} AND replayed_at IS NULL`.execute(
          trx,
        );
      if (affected(u) !== 1) throw new Error(`repair ${spec.id}: the locked row changed`);
      if (keyed !== undefined && item.lane === null && !keyed.head) await waitRowsFor(t, [spec.id]).execute(trx);
      await insertHistory(
        trx,
        t,
        spec.id,
        {
          attempt: item.attempt,
          outcome: 'repaired',
          failureClass: null,
          error: spec.reason,
          worker: spec.actor,
          startedAt: null,
        },
        spec.repairId,
      );
      return { id: spec.id, repairId: spec.repairId, duplicate: false, isHead };
    },
    (e) => errno(e) === ER_DUP_ENTRY,
  );
}

function whyRefused(row: ItemRow | undefined, spec: RepairSpec): RepairRejection | undefined {
  if (!row) return 'not_found';
  if (row.state !== 'dead' && row.state !== 'cancelled') return 'not_replayable_state';
  if (row.replayed_at !== null) return 'already_replayed';
  if (row.attempt !== spec.expectAttempt) return 'attempt_mismatch';
  if (errorDigest(row.last_error) !== spec.expectErrorDigest) return 'error_mismatch';
  return undefined;
}

async function repairedBy(exec: Executor, t: LedgerTables, spec: RepairSpec): Promise<boolean> {
  const r = await sql<{
    n: number | string;
  }>`SELECT COUNT(*) AS n FROM ${t.attempts} WHERE id = ${spec.repairId} AND item_id = ${
    spec.id
  } AND outcome = 'repaired'`.execute(exec);
  return Number(r.rows[0]?.n) > 0;
}

/**
 * Under the lane row's lock (no enqueue or locked hand-on of the lane runs
 * meanwhile): whether the item is its lane's head again. The first
 * unfinished item after it says where the lane's head is: that item itself
 * (then nothing before the repaired item is unfinished, and the head steps
 * back, if it is pending), or before the repaired item (it is not a head:
 * the repaired item waits its turn, and a hand-on reaches it, sequences being
 * gap free). With none after it, the lane row says whether anything before
 * it is unfinished (busy) or not (idle: it makes the lane busy again).
 */
async function takeLanePlace(trx: Executor, t: LedgerTables, item: ItemRow): Promise<boolean> {
  const lane = item.lane!;
  const seq = Number(item.lane_seq);
  const laneRow = await sql<{
    busy_from: number | string;
  }>`SELECT busy_from FROM ${t.lanes} WHERE queue = ${item.queue} AND lane = ${lane} FOR UPDATE`.execute(trx);
  const next = await sql<{
    id: string;
    state: string;
    is_head: number;
  }>`SELECT id, state, is_head FROM ${t.items} FORCE INDEX (ix_lane)
    WHERE queue = ${item.queue} AND lane = ${lane} AND lane_seq > ${
      seq
    } AND state IN ('pending', 'processing', 'blocked')
    ORDER BY lane_seq LIMIT 1 FOR UPDATE`.execute(trx);
  const after = next.rows[0];
  if (after === undefined) {
    if (Number(laneRow.rows[0]?.busy_from ?? 0) !== 0) return false;
    await sql`UPDATE ${t.lanes} SET busy_from = ${seq} WHERE queue = ${item.queue} AND lane = ${lane}`.execute(trx);
    return true;
  }
  if (Number(after.is_head) !== 1) return false;
  if (after.state !== 'pending') throw new RepairRejectedError(item.id, 'lane_busy');
  const stepBack = await sql`UPDATE ${t.items} SET is_head = 0, updated_at = NOW(6) WHERE id = ${
    after.id
  } AND state = 'pending' AND is_head = 1`.execute(trx);
  if (affected(stepBack) !== 1) throw new RepairRejectedError(item.id, 'lane_busy');
  return true;
}

/**
 * A keyed item is admitted by its key again, under the limits of now (as a
 * replay is): a laneless one takes a free slot or waits in its key's line;
 * in a fair queue it takes the key's next round. Undefined without a key.
 */
async function readmitKey(
  trx: Executor,
  t: LedgerTables,
  item: ItemRow,
): Promise<{ head: boolean; priority: number; stored: string | null } | undefined> {
  if (item.concurrency_key === null) return undefined;
  const again: NewItem = {
    queue: item.queue,
    type: item.type,
    payloadJson: item.payload,
    lane: item.lane,
    concurrencyKey: givenKey(item.concurrency_key),
    priority: item.priority,
    queueClass: item.queue_class as QueueClass,
    maxAttempts: item.max_attempts,
    runAt: null,
    delayMs: 0,
    idempotencyKey: item.idempotency_key,
    traceparent: item.traceparent,
  };
  scopeKeys([again], await readKeyRules(trx, t, [item.queue]), 'repair');
  const keys = await admittedKeys(trx, t, [again]);
  await admitStatement(t, keys).execute(trx);
  const [admission] = admissionsOf(
    [again],
    (await grantedRead(t, keys).execute(trx)).rows as Record<string, unknown>[],
  );
  return { head: admission?.head ?? true, priority: again.priority, stored: storedKey(again) };
}
