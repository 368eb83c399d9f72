import { errorDigest } from './ids.js';
import { givenKey, scopeOfKey } from './sql/keys/scope.js';
import { parseStages } from './sql/complete/stage-history.js';
import { TERMINAL_STATES, type AttemptRecord, type ItemState, type QueueClass, type WorkItem } from './types.js';
import type { ItemSummary } from './operator-types.js';

/** An items row as mysql2 returns it. */
export interface ItemRow {
  id: string;
  queue: string;
  type: string;
  lane: string | null;
  lane_seq: number | null;
  is_head: number;
  concurrency_key: string | null;
  queue_class: string;
  priority: number;
  payload: string;
  state: string;
  run_after: Date;
  attempt: number;
  max_attempts: number;
  lease_owner: string | null;
  lease_token: string | null;
  lease_until: Date | null;
  epoch: number | null;
  idempotency_key: string | null;
  dependency_key: string | null;
  probe_after: Date | null;
  blocked_at: Date | null;
  block_expires_at: Date | null;
  cancel_requested: number;
  checkpoint: string | null;
  progress: string | null;
  group_head: string | null;
  result: string | null;
  last_error: string | null;
  failure_class: string | null;
  replay_of: string | null;
  replayed_at: Date | null;
  traceparent: string | null;
  created_at: Date;
  started_at: Date | null;
  terminal_at: Date | null;
  updated_at: Date;
  /** Schema 17: the workflow the item is a job of. */
  workflow_id?: string | null;
}

/** The columns of a row a claim reads back (sql/claim/claimed.ts): those the claim did not write. */
export type ClaimedRow = Pick<
  ItemRow,
  | 'id'
  | 'queue'
  | 'type'
  | 'lane'
  | 'lane_seq'
  | 'concurrency_key'
  | 'queue_class'
  | 'priority'
  | 'payload'
  | 'run_after'
  | 'attempt'
  | 'max_attempts'
  | 'idempotency_key'
  | 'dependency_key'
  | 'probe_after'
  | 'blocked_at'
  | 'block_expires_at'
  | 'checkpoint'
  | 'progress'
  | 'result'
  | 'last_error'
  | 'failure_class'
  | 'replay_of'
  | 'replayed_at'
  | 'traceparent'
  | 'created_at'
  | 'workflow_id'
> & { started_at: Date };

export interface AttemptRow {
  id: string;
  item_id: string;
  attempt: number;
  outcome: string;
  failure_class: string | null;
  error: string | null;
  worker: string | null;
  started_at: Date | null;
  ended_at: Date;
  stages: string | null;
}

/**
 * Schema 2 stores "none" as '' in the lease token and owner columns and as
 * year 1000 in the lease, start and terminal times (see NO_TIME in
 * sql/common/fragments.ts); the ledger's callers see null, as before.
 */
export function noneAsNull(text: string | null): string | null {
  return text === null || text === '' ? null : text;
}

export function noTimeAsNull(d: Date | null): Date | null {
  return d === null || d.getUTCFullYear() <= 1000 ? null : d;
}

export function parseJson(text: string | null): unknown {
  return text === null ? null : (JSON.parse(text) as unknown);
}

export function toWorkItem(row: ItemRow): WorkItem {
  return {
    id: row.id,
    queue: row.queue,
    type: row.type,
    lane: row.lane,
    laneSeq: row.lane_seq === null ? null : Number(row.lane_seq),
    isHead: row.is_head === 1,
    concurrencyKey: givenKey(row.concurrency_key ?? null),
    keyScope: scopeOfKey(row.concurrency_key ?? null),
    queueClass: row.queue_class as QueueClass,
    priority: row.priority,
    payload: parseJson(row.payload),
    state: row.state as ItemState,
    runAfter: row.run_after,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    leaseOwner: noneAsNull(row.lease_owner),
    leaseToken: noneAsNull(row.lease_token),
    leaseUntil: noTimeAsNull(row.lease_until),
    epoch: row.epoch === null ? null : Number(row.epoch),
    idempotencyKey: row.idempotency_key,
    dependencyKey: row.dependency_key,
    probeAfter: row.probe_after,
    blockedAt: row.blocked_at,
    blockExpiresAt: row.block_expires_at,
    cancelRequested: row.cancel_requested === 1,
    checkpoint: parseJson(row.checkpoint),
    progress: parseJson(row.progress),
    groupHead: row.group_head,
    result: parseJson(row.result),
    lastError: row.last_error,
    failureClass: row.failure_class,
    replayOf: row.replay_of,
    replayedAt: row.replayed_at,
    traceparent: row.traceparent ?? null,
    createdAt: row.created_at,
    startedAt: noTimeAsNull(row.started_at),
    terminalAt: noTimeAsNull(row.terminal_at),
    updatedAt: row.updated_at,
    ...(row.workflow_id ? { workflowId: row.workflow_id } : {}),
  };
}

export function toAttemptRecord(row: AttemptRow): AttemptRecord {
  const record: AttemptRecord = {
    itemId: row.item_id,
    attempt: row.attempt,
    outcome: row.outcome as AttemptRecord['outcome'],
    failureClass: row.failure_class,
    error: row.error,
    worker: row.worker,
    repairId: row.outcome === 'repaired' ? row.id : null,
    startedAt: row.started_at,
    endedAt: row.ended_at,
  };
  const stages = parseStages(row.stages);
  if (stages !== undefined) record.stages = stages;
  return record;
}

/** The columns SUMMARY_COLUMNS (sql/common/fragments.ts) reads. */
export interface SummaryRow {
  id: string;
  queue: string;
  type: string;
  state: string;
  lane: string | null;
  lane_seq: number | string | null;
  is_head: number;
  concurrency_key: string | null;
  queue_class: string;
  priority: number;
  attempt: number;
  max_attempts: number;
  run_after: Date;
  created_at: Date;
  started_at: Date | null;
  terminal_at: Date | null;
  failure_class: string | null;
  last_error: string | null;
  error_digest: string;
  idempotency_key: string | null;
  /** created_at as text with its microseconds (a cursor's key). */
  created_key: string;
}

/** An ended item keeps its head flag in the ledger; a list shows as head only the one that may run. */
function liveHead(isHead: boolean, state: ItemState): boolean {
  return isHead && !TERMINAL_STATES.includes(state);
}

/**
 * An item as a list shows it, from the whole item: the error cut to 300 characters, as the list's statements cut it.
 */
export function summaryOfItem(item: WorkItem): ItemSummary {
  const {
    id,
    queue,
    type,
    state,
    lane,
    laneSeq,
    isHead,
    concurrencyKey,
    queueClass,
    priority,
    attempt,
    maxAttempts,
    runAfter,
    createdAt,
    startedAt,
    terminalAt,
    failureClass,
    idempotencyKey,
  } = item;
  const lastError = item.lastError === null ? null : [...item.lastError].slice(0, 300).join('');
  return {
    id,
    queue,
    type,
    state,
    lane,
    laneSeq,
    isHead: liveHead(isHead, state),
    concurrencyKey,
    queueClass,
    priority,
    attempt,
    maxAttempts,
    runAfter,
    createdAt,
    startedAt,
    terminalAt,
    failureClass,
    lastError,
    errorDigest: errorDigest(item.lastError),
    idempotencyKey,
  };
}

export function toItemSummary(row: SummaryRow): ItemSummary {
  return {
    id: row.id,
    queue: row.queue,
    type: row.type,
    state: row.state as ItemState,
    lane: row.lane,
    laneSeq: row.lane_seq === null ? null : Number(row.lane_seq),
    isHead: liveHead(Number(row.is_head) === 1, row.state as ItemState),
    concurrencyKey: givenKey(row.concurrency_key ?? null),
    queueClass: row.queue_class as QueueClass,
    priority: row.priority,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    runAfter: row.run_after,
    createdAt: row.created_at,
    startedAt: noTimeAsNull(row.started_at),
    terminalAt: noTimeAsNull(row.terminal_at),
    failureClass: row.failure_class,
    lastError: row.last_error,
    errorDigest: String(row.error_digest),
    idempotencyKey: row.idempotency_key,
  };
}
