import type { ClaimedItem, KeyScope, QueueClass } from '../../types.js';
import { claimedItem, type Lease } from '../claim/claimed.js';
import { storedKey, type KeyRule } from '../keys/scope.js';

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
  /** The workflow it is a job of (schema 17; sql/workflows/). */
  workflowId?: string;
  /** A workflow's job with dependencies: pending but not its own head, so no claim reads it until they settle. */
  waiting?: boolean;
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
      workflow_id: item.workflowId ?? null,
    },
    lease,
  );
}
