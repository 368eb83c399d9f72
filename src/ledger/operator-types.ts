import type { ItemState, QueueClass } from './types.js';

/**
 * Why an item is where it is (ledger.explain, `lanewake inspect --why`): docs/design/supervisor.md, "Why isn't it
 * running?".
 */
export const WHY_CODES = [
  'terminal',
  'processing',
  'lease_expired',
  'blocked_on_dependency',
  'not_due',
  'rate_limited',
  'behind_lane_head',
  'waiting_for_dependencies',
  'key_at_limit',
  'no_live_consumer',
  'class_not_served',
  'type_not_served',
  'epoch_not_served',
  'queue_capped',
  'queue_paused',
  'stale_only',
  'claimable',
] as const;
export type WhyCode = (typeof WHY_CODES)[number];

export interface Explanation {
  id: string;
  state: ItemState;
  code: WhyCode;
  /** One sentence for a person. */
  message: string;
  /** The facts behind it, by name: times as ISO strings, counts as numbers. */
  details: Record<string, string | number | null>;
  /** The ledger's clock when it was computed. */
  at: Date;
  /**
   * The schedule whose fire enqueued the item (its idempotency key `<name>:<fire time ms>`, the schedule still in the
   * ledger).
   */
  schedule?: { name: string; fireTime: string };
}

// What an operator's views read (src/ledger/operator.ts; the dashboard's read API, docs/operations/observing.md "The
// dashboard").

/** An item as a list shows it: no payload, result or checkpoint; the last error cut to 300 characters. */
export interface ItemSummary {
  id: string;
  queue: string;
  type: string;
  state: ItemState;
  lane: string | null;
  laneSeq: number | null;
  /** The item is its lane's head, or admitted by its key, and has not ended. */
  isHead: boolean;
  concurrencyKey: string | null;
  queueClass: QueueClass;
  priority: number;
  attempt: number;
  maxAttempts: number;
  runAfter: Date;
  createdAt: Date;
  startedAt: Date | null;
  terminalAt: Date | null;
  failureClass: string | null;
  /** The first 300 characters of the last error. */
  lastError: string | null;
  /** SHA-256 (hex) of the whole last error ('' when none): what a replay's guard compares. */
  errorDigest: string;
  idempotencyKey: string | null;
}

/** Which items of a queue a page lists; every field narrows it. */
export interface ItemFilter {
  queue: string;
  state?: ItemState | undefined;
  type?: string | undefined;
  lane?: string | undefined;
  /** The concurrency key. */
  key?: string | undefined;
  idempotencyKey?: string | undefined;
  id?: string | undefined;
}

/** One page of items and the cursor of the next (null: no more). */
export interface ItemPage {
  items: ItemSummary[];
  next: string | null;
}

/** A lane with a head that has not ended. */
export interface LaneSummary {
  lane: string;
  headId: string;
  headState: ItemState;
  /** Since its head became due (0 while it is not due yet). */
  waitingMs: number;
  /** Its items from the head to its tail, the head included. */
  pending: number;
}

/** The dead items of one queue, type and failure class. */
export interface DeadGroup {
  queue: string;
  type: string;
  failureClass: string | null;
  count: number;
  /** The last error of the most recent one (first 300 characters). */
  lastError: string | null;
  lastAt: Date;
  sampleId: string;
}

/** One minute of a queue's last hour. */
export interface SeriesPoint {
  at: Date;
  completed: number;
  failed: number;
  /**
   * Enqueue→start (as lanewake_enqueue_to_start_seconds: delays and backoff included) of the items that started in the
   * minute; null when none did.
   */
  startP50Ms: number | null;
  startP99Ms: number | null;
}

export type QueueSeries = { bucketMs: number; points: SeriesPoint[] };

/** Which dead items a bulk replay re-drives. */
export interface DeadFilter {
  queue: string;
  type?: string | undefined;
  failureClass?: string | undefined;
  lane?: string | undefined;
  key?: string | undefined;
}

/** Which terminal items a bulk purge deletes. */
export interface PurgeFilter {
  queue: string;
  state: 'completed' | 'skipped' | 'dead' | 'cancelled';
  type?: string | undefined;
  /** Only items that ended at least this long ago (default 0: all). */
  olderThanMs?: number | undefined;
}
