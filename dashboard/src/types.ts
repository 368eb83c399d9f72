// The JSON the admin server answers (docs/operations/observing.md, "Dashboard": the HTTP API). Dates are ISO strings.

export const ITEM_STATES = ['pending', 'processing', 'blocked', 'completed', 'skipped', 'dead', 'cancelled'] as const;
export type ItemState = (typeof ITEM_STATES)[number];
export const TERMINAL_STATES: readonly ItemState[] = ['completed', 'skipped', 'dead', 'cancelled'];

export interface Session {
  canAct: boolean;
  showPayloads: boolean;
  version: string;
}

export interface LiveConsumer {
  name: string;
  queue: string;
  classes: string[];
  types: string[] | null;
  concurrency: number;
  maxProcessing: number | null;
  epoch: number | null;
  version: string;
  startedAt: string;
  lastSeen: string;
}

export interface SeriesPoint {
  at: string;
  completed: number;
  failed: number;
  startP50Ms: number | null;
  startP99Ms: number | null;
}

/** A count from a bounded range: exactly `count`, or with `atLeast` that many or more (it stopped at its cap). */
export interface BoundedCount {
  count: number;
  atLeast: boolean;
}

export interface QueueView {
  queue: string;
  counts: Record<ItemState, BoundedCount>;
  due: BoundedCount;
  scheduled: BoundedCount;
  oldestDueAgeMs: number;
  paused: boolean;
  /** The queue claims only rescued work (lanewake stale-only). */
  staleOnly: boolean;
  consumers: LiveConsumer[];
  series: { bucketMs: number; points: SeriesPoint[] };
}

export interface ItemSummary {
  id: string;
  queue: string;
  type: string;
  state: ItemState;
  lane: string | null;
  laneSeq: number | null;
  /** Its lane's head (or admitted by its key) and not ended: the server leaves the flag off ended items. */
  isHead: boolean;
  concurrencyKey: string | null;
  queueClass: string;
  priority: number;
  attempt: number;
  maxAttempts: number;
  runAfter: string | null;
  createdAt: string;
  startedAt: string | null;
  terminalAt: string | null;
  failureClass: string | null;
  lastError: string | null;
  errorDigest: string;
  idempotencyKey: string | null;
}

export interface Page<T> {
  items: T[];
  next: string | null;
}

export interface ItemDetail extends ItemSummary {
  payload?: unknown;
  result: unknown;
  progress: unknown;
  checkpoint: unknown;
  groupHead: string | null;
  dependencyKey: string | null;
  leaseOwner: string | null;
  leaseUntil: string | null;
  replayOf: string | null;
  cancelRequested: boolean;
}

export interface AttemptRecord {
  itemId: string;
  attempt: number;
  outcome: string;
  failureClass: string | null;
  error: string | null;
  worker: string | null;
  /** On a `repaired` row: the repair's id (its reason is `error`, its actor `worker`). */
  repairId: string | null;
  startedAt: string | null;
  endedAt: string;
  /** The stages the attempt timed (ctx.stage), a repeated name summed; absent when it timed none. */
  stages?: { name: string; ms: number }[];
}

export interface StepRecord {
  name: string;
  attempt: number;
  result: unknown;
  doneAt: string;
}

export interface Explanation {
  id: string;
  state: ItemState;
  code: string;
  message: string;
  details: Record<string, string | number | null>;
  at: string;
  schedule?: { name: string; fireTime: string };
}

export interface ItemResponse {
  item: ItemDetail;
  attempts: AttemptRecord[];
  steps: StepRecord[];
  group: string[];
  why: Explanation;
}

export interface ScheduleView {
  name: string;
  source: 'config' | 'api';
  pattern: string | null;
  tz: string | null;
  everyMs: number | null;
  item: { queue: string; type: string; payload?: unknown; lane?: string };
  backfillMs: number;
  paused: boolean;
  nextFireAt: string;
  lastFireAt: string | null;
  fires: number;
}

export interface LaneView {
  lane: string;
  headId: string | null;
  headState: ItemState | null;
  waitingMs: number;
  pending: number;
}

export interface DeadGroup {
  queue: string;
  type: string;
  failureClass: string | null;
  count: number;
  lastError: string | null;
  lastAt: string;
  sampleId: string;
}

/** The filter of the item list, as in the URL's query. */
export interface ItemFilter {
  state?: ItemState;
  type?: string;
  lane?: string;
  key?: string;
  idempotencyKey?: string;
  id?: string;
}
