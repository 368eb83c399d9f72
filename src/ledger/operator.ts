import { z } from 'zod';
import { ReplayRejectedError, ValidationError } from '../errors.js';
import type { LedgerDb } from './connection.js';
import type { LedgerCapabilities } from './capabilities.js';
import { deadFilterSchema, itemFilterSchema, pageSchema, purgeFilterSchema } from './inputs.js';
import { toItemSummary } from './rows.js';
import { browseItems, type ItemPosition } from './sql/operator/browse-items.js';
import { liveConsumers } from './sql/fleet/consumers.js';
import { countDeadCandidates, deadCandidates, ledgerNowText } from './sql/operator/dead-candidates.js';
import { deadGroups } from './sql/operator/dead-groups.js';
import { browseLaneItems, browseLanes, groupMembers } from './sql/lanes/browse.js';
import { countPurgeable, purgeFilteredBatch, type PurgePosition } from './sql/upkeep/purge.js';
import { queueSeen } from './sql/enqueue/known-queue.js';
import { pausedQueues, staleOnlyQueues } from './sql/queues/queue-settings.js';
import { queueSeries } from './sql/operator/queue-series.js';
import { replayItem } from './sql/operator/replay.js';
import { listQueues, queueStats } from './sql/operator/stats.js';
import type { LedgerTables } from './tables.js';
import { countLess } from './bounded-count.js';
import type { BoundedCount, LiveConsumer, QueueClass, QueueStats } from './types.js';
import type {
  DeadFilter,
  DeadGroup,
  ItemFilter,
  ItemPage,
  LaneSummary,
  PurgeFilter,
  QueueSeries,
} from './operator-types.js';
import { itemId, laneKey, queueName, validate } from './validation.js';

/** A queue as an operator's overview shows it. */
export interface QueueView extends QueueStats {
  /** Pending items due now (pending less scheduled): a floor when pending is. */
  due: BoundedCount;
  paused: boolean;
  /** The queue claims only rescued work (Ledger.setStaleOnly). */
  staleOnly: boolean;
  consumers: LiveConsumer[];
  series: QueueSeries;
}

/** A dead item a bulk replay re-drove: the new item, for its wake-up. */
export interface ReplayedItem {
  id: string;
  queue: string;
  queueClass: QueueClass;
}

/** How many dead items a bulk replay reads and re-drives at a time (each replay its own guarded transaction). */
export const REPLAY_BATCH = 100;
/** How many items a bulk purge deletes per transaction. */
export const PURGE_BATCH = 500;

const laneLimit = z.number().int('must be a whole number').min(1).max(200).default(50);

/**
 * What an operator reads and does in bulk (the dashboard, docs/operations.md
 * "The dashboard"): pages of items, lanes, dead groups, a queue's last hour,
 * and bulk replay and purge. Every read is a bounded index range (the SQL is
 * in sql/operator/browse-items.ts, sql/lanes/browse.ts, sql/operator/dead-groups.ts and queue-series.ts);
 * a page's cursor is opaque to its callers. Reached as `ledger.operator`.
 */
export class LedgerOperator {
  constructor(
    private readonly db: LedgerDb,
    private readonly t: LedgerTables,
    private readonly capabilities: () => Promise<LedgerCapabilities>,
  ) {}

  /**
   * A page of a queue's items, newest first (one lane's: latest in lane first); `after` is the previous page's `next`.
   */
  async items(
    filter: ItemFilter,
    page: { after?: string | undefined; limit?: number | undefined } = {},
  ): Promise<ItemPage> {
    const f = validate(itemFilterSchema, stripUndefined(filter), 'items');
    const p = validate(pageSchema, stripUndefined(page), 'items');
    const after = p.after === undefined ? undefined : decodeCursor(p.after);
    const r = await browseItems(this.db, this.t, f, after, p.limit);
    return { items: r.rows.map(toItemSummary), next: r.next === null ? null : encodeCursor(r.next) };
  }

  /** The lanes of a queue whose head has not ended, longest waiting first. */
  lanes(queue: string, limit?: number): Promise<LaneSummary[]> {
    validate(queueName, queue, 'lanes', 'queue');
    const n = validate(laneLimit, limit, 'lanes', 'limit');
    return browseLanes(this.db, this.t, queue, n);
  }

  /** A page of one lane's items in lane order (the head has isHead). */
  async laneItems(
    queue: string,
    lane: string,
    page: { after?: string | undefined; limit?: number | undefined } = {},
  ): Promise<ItemPage> {
    validate(queueName, queue, 'laneItems', 'queue');
    validate(laneKey, lane, 'laneItems', 'lane');
    const p = validate(pageSchema, stripUndefined(page), 'laneItems');
    const after = p.after === undefined ? undefined : decodeCursor(p.after);
    if (after !== undefined && after.by !== 'lane') throw badCursor();
    const r = await browseLaneItems(this.db, this.t, { queue, lane, afterSeq: after?.seq, limit: p.limit });
    return {
      items: r.rows.map(toItemSummary),
      next: r.next === null ? null : encodeCursor({ by: 'lane', seq: r.next }),
    };
  }

  /** The ids of the coalesced group an item was last claimed in (its head first), [] when none. */
  group(id: string): Promise<string[]> {
    validate(itemId, id, 'group', 'id');
    return groupMembers(this.db, this.t, id);
  }

  /** Dead items grouped by type and failure class, of one queue or all. */
  async deadGroups(queue?: string): Promise<DeadGroup[]> {
    if (queue !== undefined) validate(queueName, queue, 'deadGroups', 'queue');
    const queues = queue === undefined ? await listQueues(this.db, this.t) : [queue];
    const groups: DeadGroup[] = [];
    for (const q of queues) groups.push(...(await deadGroups(this.db, this.t, q)));
    return groups;
  }

  /** A queue's last hour in one-minute buckets. */
  series(queue: string): Promise<QueueSeries> {
    validate(queueName, queue, 'series', 'queue');
    return queueSeries(this.db, this.t, queue);
  }

  /** Every queue with items (or the one named): its counts, whether paused, its live consumers and its last hour. */
  async queues(queue?: string): Promise<QueueView[]> {
    if (queue !== undefined) validate(queueName, queue, 'queues', 'queue');
    const stats = await queueStats(this.db, this.t, queue);
    const names = stats.map((s) => s.queue);
    const [paused, staleOnly, consumers] = await Promise.all([
      pausedQueues(this.db, this.t, names),
      staleOnlyQueues(this.db, this.t, names),
      liveConsumers(this.db, this.t, queue),
    ]);
    const views: QueueView[] = [];
    for (const s of stats) {
      views.push({
        ...s,
        due: countLess(s.counts.pending, s.scheduled),
        paused: paused.has(s.queue),
        staleOnly: staleOnly.has(s.queue),
        consumers: consumers.filter((c) => c.queue === s.queue),
        series: await queueSeries(this.db, this.t, s.queue),
      });
    }
    return views;
  }

  /**
   * Whether the ledger has ever heard of this queue: it holds an item of it, a
   * setting (paused, a limit per key, fairness), an ownership epoch, or a
   * consumer's registration. The CLI refuses to set a setting on a queue it
   * has not seen unless told the queue is new (docs/operations.md).
   */
  hasSeenQueue(queue: string): Promise<boolean> {
    validate(queueName, queue, 'hasSeenQueue', 'queue');
    return queueSeen(this.db, this.t, queue);
  }

  /** How many dead items of the filter a bulk replay would re-drive now. */
  async countReplayable(filter: DeadFilter): Promise<number> {
    const f = validate(deadFilterSchema, stripUndefined(filter), 'replay');
    return countDeadCandidates(this.db, this.t, f, await ledgerNowText(this.db));
  }

  /**
   * Re-drives every dead item of the filter that ended before this call, as
   * `replay` does one (a new item at the tail of its lane), each guarded by
   * the attempt and error it was read with, so an item that changed since
   * (replayed meanwhile by someone else) is skipped. In batches of
   * REPLAY_BATCH; `onBatch` gets each batch's new items (to announce them).
   */
  async replayDead(
    filter: DeadFilter,
    onBatch?: (created: readonly ReplayedItem[]) => Promise<void>,
  ): Promise<{ replayed: number; skipped: number }> {
    const f = validate(deadFilterSchema, stripUndefined(filter), 'replay');
    const endedBy = await ledgerNowText(this.db);
    const { idOrder } = await this.capabilities();
    let replayed = 0;
    let skipped = 0;
    for (let after = ''; ; ) {
      const batch = await deadCandidates(this.db, this.t, f, endedBy, after, REPLAY_BATCH);
      const created: ReplayedItem[] = [];
      for (const c of batch) {
        try {
          const r = await replayItem(
            this.db,
            this.t,
            { id: c.id, expectAttempt: c.attempt, expectErrorDigest: c.errorDigest },
            idOrder,
          );
          created.push({ id: r.id, queue: f.queue, queueClass: c.queueClass });
          replayed++;
        } catch (error) {
          if (!(error instanceof ReplayRejectedError)) throw error;
          skipped++;
        }
      }
      if (created.length > 0) await onBatch?.(created);
      const last = batch[batch.length - 1];
      if (!last || batch.length < REPLAY_BATCH) return { replayed, skipped };
      after = last.id;
    }
  }

  /** How many items a bulk purge of the filter would delete now. */
  countPurgeable(filter: PurgeFilter): Promise<number> {
    const f = validate(purgeFilterSchema, stripUndefined(filter), 'purge');
    return countPurgeable(this.db, this.t, f);
  }

  /**
   * Deletes the terminal items of the filter (with their history and steps), PURGE_BATCH per transaction; returns how
   * many.
   */
  async purge(filter: PurgeFilter): Promise<number> {
    const f = validate(purgeFilterSchema, stripUndefined(filter), 'purge');
    let purged = 0;
    for (let after: PurgePosition | undefined; ; ) {
      const r = await purgeFilteredBatch(this.db, this.t, f, after, PURGE_BATCH);
      purged += r.purged;
      if (r.next === undefined) return purged;
      after = r.next;
    }
  }
}

function stripUndefined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

function badCursor(): ValidationError {
  return new ValidationError([{ field: 'after', message: 'is not a cursor of this list' }], 'items');
}

/** A page's cursor: its position as base64url JSON, opaque to callers. */
function encodeCursor(p: ItemPosition): string {
  return Buffer.from(JSON.stringify(p.by === 'created' ? ['c', p.key, p.id] : ['l', p.seq])).toString('base64url');
}

function decodeCursor(text: string): ItemPosition {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    throw badCursor();
  }
  if (
    Array.isArray(v) &&
    v[0] === 'c' &&
    typeof v[1] === 'string' &&
    /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$/.test(v[1]) &&
    typeof v[2] === 'string' &&
    itemId.safeParse(v[2]).success
  ) {
    return { by: 'created', key: v[1], id: v[2] };
  }
  if (Array.isArray(v) && v[0] === 'l' && Number.isSafeInteger(v[1])) return { by: 'lane', seq: Number(v[1]) };
  throw badCursor();
}
