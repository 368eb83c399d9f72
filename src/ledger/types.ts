/** Item states (docs/design.md §3). */
export const ITEM_STATES = [
  'pending',
  'processing',
  'blocked',
  'completed',
  'skipped',
  'dead',
  'cancelled',
] as const;
export type ItemState = (typeof ITEM_STATES)[number];
export const TERMINAL_STATES: readonly ItemState[] = ['completed', 'skipped', 'dead', 'cancelled'];

export const QUEUE_CLASSES = ['interactive', 'default', 'bulk'] as const;
export type QueueClass = (typeof QUEUE_CLASSES)[number];

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** A work item as the ledger holds it. Times come from the ledger's clock. */
export interface WorkItem {
  id: string;
  queue: string;
  type: string;
  /** null: the item is its own lane. */
  lane: string | null;
  laneSeq: number | null;
  /** True while the item is its lane's head (the only one of its lane that may run). */
  isHead: boolean;
  queueClass: QueueClass;
  priority: number;
  payload: unknown;
  state: ItemState;
  runAfter: Date;
  attempt: number;
  maxAttempts: number;
  leaseOwner: string | null;
  leaseToken: string | null;
  leaseUntil: Date | null;
  epoch: number | null;
  idempotencyKey: string | null;
  dependencyKey: string | null;
  probeAfter: Date | null;
  blockedAt: Date | null;
  blockExpiresAt: Date | null;
  cancelRequested: boolean;
  checkpoint: unknown;
  result: unknown;
  lastError: string | null;
  failureClass: string | null;
  replayOf: string | null;
  replayedAt: Date | null;
  createdAt: Date;
  startedAt: Date | null;
  terminalAt: Date | null;
  updatedAt: Date;
}

/** An item this caller holds the lease on: the handle every finalize takes. */
export interface ClaimedItem extends WorkItem {
  state: 'processing';
  leaseToken: string;
  leaseOwner: string;
  leaseUntil: Date;
}

export interface AttemptRecord {
  itemId: string;
  attempt: number;
  outcome: 'completed' | 'retried' | 'dead' | 'released' | 'skipped' | 'blocked' | 'lease_expired' | 'cancelled';
  failureClass: string | null;
  error: string | null;
  worker: string | null;
  startedAt: Date | null;
  endedAt: Date;
}

export interface EnqueueResult {
  id: string;
  /** True when an item with the same idempotency key already existed; `id` is that item's. */
  duplicate: boolean;
  laneSeq: number | null;
}
