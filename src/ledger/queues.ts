import { QueueDeleteRefusedError, ValidationError } from '../errors.js';
import { DRAIN_SETTLE_MS } from './queue-gate.js';
import {
  checkDeletable,
  deleteQueueRows,
  drainFlags,
  queueRows,
  registerQueues,
  writeDrainOnly,
  type QueueRow,
} from './sql/queues/drain.js';
import type { LedgerCore } from './core.js';
import { readKeyLimits, setKeyLimit } from './sql/keys/limits.js';
import { pausedQueues, staleOnlyQueues, writeQueueSetting, writeQueueSettings } from './sql/queues/queue-settings.js';
import type { ConcurrencyLimits, QueueSettings } from './types.js';
import {
  concurrencyLimitSchema,
  fairnessSchema,
  queueName,
  queueSettingsSchema,
  typeName,
  validate,
} from './validation.js';

/**
 * A queue's settings the ledger holds for the whole fleet: key limits, fairness, pause, stale-only, drain-only,
 * slots and the fleet cap; its definition, incarnation and delete.
 */
export class LedgerQueues {
  constructor(private readonly core: LedgerCore) {}

  /**
   * How many items of one concurrency key of `queue` may be admitted at once
   * (docs/design/keys.md, Concurrency keys); null lifts the limit. Stored in
   * the ledger, so every producer and consumer of the queue holds to it; a
   * raised limit admits waiting items at once. Returns how many keys had
   * items waiting.
   *
   * With `{ type }`, the limit is that type's own: its items enqueued from
   * then on are admitted per key and type, counted apart from the queue's
   * limit and the other types'. An item keeps the limit that admitted it
   * until it ends; null lifts the type's own limit, and its later items fall
   * under the queue's.
   */
  async setConcurrencyLimit(queue: string, limit: number | null, options: { type?: string } = {}): Promise<number> {
    validate(queueName, queue, 'setConcurrencyLimit', 'queue');
    validate(concurrencyLimitSchema, limit, 'setConcurrencyLimit', 'limit');
    if (options.type !== undefined) validate(typeName, options.type, 'setConcurrencyLimit', 'type');
    return setKeyLimit(this.core.db, this.core.tables, queue, limit, options.type);
  }

  /** The queue's limit per concurrency key and its types' own, as the ledger holds them now. */
  concurrencyLimits(queue: string): Promise<ConcurrencyLimits> {
    validate(queueName, queue, 'concurrencyLimits', 'queue');
    return readKeyLimits(this.core.db, this.core.tables, queue);
  }

  /**
   * `'key'`: the queue serves its concurrency keys in turn (docs/design/keys.md,
   * Fair queues): each keyed item enqueued from now on takes its key's next
   * round as its priority, so claims take one key's items no faster than
   * another's, however many items or lanes a key has. `null`: oldest first.
   */
  async setFairness(queue: string, fairness: 'key' | null): Promise<void> {
    validate(queueName, queue, 'setFairness', 'queue');
    validate(fairnessSchema, fairness, 'setFairness', 'fairness');
    await writeQueueSetting(this.core.db, this.core.tables, queue, 'fair', fairness === 'key' ? 1 : 0);
  }

  /**
   * Pauses a queue (docs/design/supervisor.md, Pausing a queue): its consumers claim
   * nothing, by any path, in any process, from their next sweep (at once
   * through `Producer.pause`, which also tells them on the control stream);
   * enqueues still commit, and items already running finish. Held by the
   * ledger until resume(). The claim statements themselves do not check it:
   * a program calling `claim` directly checks `pausedQueues` first.
   */
  async pause(queue: string): Promise<void> {
    validate(queueName, queue, 'pause', 'queue');
    await writeQueueSetting(this.core.db, this.core.tables, queue, 'paused', 1);
  }

  /** Resumes a paused queue: claims run again. */
  async resume(queue: string): Promise<void> {
    validate(queueName, queue, 'resume', 'queue');
    await writeQueueSetting(this.core.db, this.core.tables, queue, 'paused', 0);
  }

  /**
   * Stale-only (docs/design/consumer.md, "Stale-only claims"): while on, the
   * queue's consumers claim only rescued work, items whose lease expired,
   * and no new pending work, from their next sweep. Held by the ledger until
   * set off. For a struggling database: the work that was held is finished,
   * and nothing new is taken on.
   */
  async setStaleOnly(queue: string, on: boolean): Promise<void> {
    validate(queueName, queue, 'setStaleOnly', 'queue');
    if (typeof on !== 'boolean')
      throw new ValidationError([{ field: 'on', message: 'must be true or false' }], 'setStaleOnly');
    await writeQueueSetting(this.core.db, this.core.tables, queue, 'stale_only', on ? 1 : 0);
  }

  /** Which of these queues are stale-only. */
  async staleOnlyQueues(queues: readonly string[]): Promise<Set<string>> {
    for (const q of queues) validate(queueName, q, 'staleOnlyQueues', 'queue');
    return staleOnlyQueues(this.core.db, this.core.tables, queues);
  }

  /** Which of these queues are paused. */
  async pausedQueues(queues: readonly string[]): Promise<Set<string>> {
    for (const q of queues) validate(queueName, q, 'pausedQueues', 'queue');
    return pausedQueues(this.core.db, this.core.tables, queues);
  }

  /**
   * Drain-only (docs/design.md §7, "Draining and deleting a queue"): while
   * on, enqueues to the queue are refused with QueueDrainingError, from every
   * producer within a second; its consumers finish every item it holds. Once
   * it is empty, deleteQueue removes it. Off: it takes items again.
   */
  async setDrainOnly(queue: string, on: boolean): Promise<void> {
    validate(queueName, queue, 'setDrainOnly', 'queue');
    if (typeof on !== 'boolean')
      throw new ValidationError([{ field: 'on', message: 'must be true or false' }], 'setDrainOnly');
    await writeDrainOnly(this.core.db, this.core.tables, queue, on);
  }

  /** Which of these queues are drain-only. */
  async drainOnlyQueues(queues: readonly string[]): Promise<Set<string>> {
    for (const q of queues) validate(queueName, q, 'drainOnlyQueues', 'queue');
    const flags = (await drainFlags(this.core.db, this.core.tables, queues)) ?? new Map<string, boolean>();
    return new Set([...flags].filter(([, on]) => on).map(([q]) => q));
  }

  /**
   * Defines a queue: writes its row if it has none (a queue also gets one at
   * its first enqueue), so workers serving a pattern that matches it start its
   * consumers before its first item; with `settings`, writes them too (as
   * updateQueue, whether or not it was new). Returns whether it was new.
   */
  async createQueue(queue: string, settings?: QueueSettings): Promise<boolean> {
    validate(queueName, queue, 'createQueue', 'queue');
    if (settings !== undefined) validate(queueSettingsSchema, settings, 'createQueue', 'settings');
    const before = await drainFlags(this.core.db, this.core.tables, [queue]);
    if (!before?.has(queue)) await registerQueues(this.core.db, this.core.tables, [queue]);
    if (settings !== undefined) await this.writeSettings(queue, settings);
    return before?.has(queue) !== true;
  }

  /**
   * Changes a queue's settings (QueueSettings), making its row if it has none:
   * every worker serving it applies them within one reconcile interval, without
   * a restart, save a value its own config pins. A bad value, or none given:
   * ValidationError naming the field, nothing written.
   */
  async updateQueue(queue: string, settings: QueueSettings): Promise<void> {
    validate(queueName, queue, 'updateQueue', 'queue');
    const s = validate(queueSettingsSchema, settings, 'updateQueue', 'settings');
    if (Object.values(s).every((v) => v === undefined))
      throw new ValidationError([{ field: 'settings', message: 'name at least one setting' }], 'updateQueue');
    await this.writeSettings(queue, s);
  }

  private async writeSettings(queue: string, s: QueueSettings): Promise<void> {
    const { db, tables } = this.core;
    const paused = s.paused === undefined ? undefined : s.paused ? 1 : 0;
    await writeQueueSettings(db, tables, queue, { slots: s.slots, max_processing: s.maxProcessing, paused });
    // Its own statements: a raised limit admits the items waiting on it, a key per transaction.
    if (s.concurrencyLimit !== undefined) await setKeyLimit(db, tables, queue, s.concurrencyLimit);
  }

  /** Every queue the ledger holds (its lw_queues rows), or those of `queues` it holds, in name order. */
  queueRows(queues?: readonly string[]): Promise<QueueRow[]> {
    if (queues !== undefined) for (const q of queues) validate(queueName, q, 'queueRows', 'queues');
    return queueRows(this.core.db, this.core.tables, queues);
  }

  /**
   * Deletes a drain-only queue that holds no unfinished item, with every row
   * the ledger keeps of it; returns how many (terminal) items went. Refused
   * with QueueDeleteRefusedError, nothing deleted, when it is not drain-only,
   * became so less than DRAIN_SETTLE_MS ago, or holds unfinished items. An
   * enqueue to the name afterwards starts a queue of that name afresh.
   */
  async deleteQueue(queue: string): Promise<{ items: number }> {
    validate(queueName, queue, 'deleteQueue', 'queue');
    const { db, tables } = this.core;
    const refused = await checkDeletable(db, tables, queue, DRAIN_SETTLE_MS);
    if (refused?.refused === 'not_drain_only') throw new QueueDeleteRefusedError(queue, 'not_drain_only');
    if (refused?.refused === 'settling') throw new QueueDeleteRefusedError(queue, 'settling', 0, refused.retryInMs);
    if (refused?.refused === 'not_empty') throw new QueueDeleteRefusedError(queue, 'not_empty', refused.unfinished);
    return { items: await deleteQueueRows(db, tables, queue) };
  }
}
