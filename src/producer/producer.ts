import type { Kysely, Transaction } from 'kysely';
import type { ClaimCandidate, EnqueueInput, Ledger } from '../ledger/ledger.js';
import type { Executor } from '../ledger/connection.js';
import type { DeadFilter } from '../ledger/operator-types.js';
import type { EnqueueResult, QueueClass } from '../ledger/types.js';
import { TransactionConflictError, TransactionRolledBackError } from '../errors.js';
import { isRetryableConflict } from '../ledger/retry.js';
import { sleep } from '../sleep.js';
import { groupBy } from '../group-by.js';
import type { Reservation } from '../consumer/reservations.js';
import type { TakenOffer } from '../wake/offers.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import { EnqueueBatcher } from './enqueue-batcher.js';
import { markSingleEnqueue } from '../tracing/publish.js';
import type { WakeTimer } from '../wake/timers.js';
import type { RecurringSchedule, ScheduleView } from '../ledger/schedule-types.js';
import type { WorkflowInput, WorkflowResult } from '../ledger/workflow-types.js';
import { workflowRoots } from './workflow-roots.js';

/**
 * The queue of a batch whose first item might be inserted claimed under an offer, else undefined (a
 * rough look at raw input).
 */
function offerQueue(inputs: readonly EnqueueInput[]): string | undefined {
  const first = inputs[0] as Partial<Record<keyof EnqueueInput, unknown>> | undefined;
  if (typeof first !== 'object' || first === null || typeof first.queue !== 'string') return undefined;
  if (
    first.idempotencyKey !== undefined ||
    first.runAt !== undefined ||
    (typeof first.delayMs === 'number' && first.delayMs > 0)
  )
    return undefined;
  return first.queue;
}

/** How many times producer.transaction runs a transaction the database rolled back on its own, in all. */
export const TRANSACTION_RUNS = 5;

export interface ProducerOptions {
  ledger: Ledger;
  /** Without a wake channel, consumers find new work at their next ledger sweep. */
  wake?: WakeChannel | undefined;
}

/** What to announce once a batch has committed. */
export interface AfterCommit {
  results: EnqueueResult[];
  /** Publishes the batch's wake-ups (and timers for future items). Call only after COMMIT; never throws. */
  publish: () => Promise<void>;
}

export interface ProducerTransaction<DB> {
  /** The caller's transaction, for its own writes. */
  trx: Transaction<DB>;
  enqueue(input: EnqueueInput): Promise<EnqueueResult>;
  enqueueMany(inputs: readonly EnqueueInput[]): Promise<EnqueueResult[]>;
  /** A workflow in this transaction (docs/design/workflows.md); its ready jobs are announced after the commit. */
  workflow(input: WorkflowInput): Promise<WorkflowResult>;
}

/**
 * Commits work to the ledger, then wakes consumers. A wake-up is published
 * only after the commit, so rolled-back work is never announced, and a
 * failed publish is never thrown after the work committed.
 */
export class Producer {
  private readonly singles: EnqueueBatcher;

  constructor(private readonly options: ProducerOptions) {
    this.singles = new EnqueueBatcher(
      (inputs) => this.enqueueMany(inputs),
      (input) => this.ledger.checkEnqueue(input),
    );
  }

  get ledger(): Ledger {
    return this.options.ledger;
  }

  /**
   * One item. Single enqueues that arrive while others are in flight share their batch
   * (src/producer/enqueue-batcher.ts).
   */
  enqueue(input: EnqueueInput): Promise<EnqueueResult> {
    // Its publish span is its caller's, whichever batch it goes out in (src/tracing/publish.ts).
    markSingleEnqueue(input);
    return this.singles.enqueue(input);
  }

  async enqueueMany(inputs: readonly EnqueueInput[]): Promise<EnqueueResult[]> {
    // A consumer of the queue with free slots gets what it can take inserted
    // already claimed for it (one commit before its handler starts, not two):
    // one in this process directly, one elsewhere through its standing offer
    // (then handed over after the commit). Only the rest is announced.
    const offer = await this.takeOffer(inputs);
    let local: Reservation | undefined;
    let offerUsed = false;
    let out: Awaited<ReturnType<Ledger['enqueueClaiming']>>;
    try {
      out = await this.ledger.enqueueClaiming(inputs, (eligible) => {
        local = this.localHandover(eligible);
        if (local) return local.lease;
        if (!offer || !eligible.some(offer.fits)) return undefined;
        offerUsed = true;
        return { ...offer.lease, accepts: offer.fits };
      });
    } catch (error) {
      local?.cancel();
      // A used offer is not given back: the insert may have committed with its answer lost. Its
      // consumer finds out from the ledger (by the offer's token) once no handoff comes.
      if (offer && !offerUsed) void offer.giveBack();
      throw error;
    }
    local?.accept(out.claimed);
    if (offer && !offerUsed) void offer.giveBack();
    if (offer && offerUsed) await offer.handOver(out.claimed);
    if (out.claimed.length === 0) {
      await this.announce(inputs, out.results);
      return out.results;
    }
    const taken = new Set(out.claimed.map((c) => c.id));
    const rest = inputs.flatMap((input, i) =>
      taken.has(out.results[i]?.id ?? '') ? [] : [{ input, result: out.results[i]! }],
    );
    await this.announce(
      rest.map((r) => r.input),
      rest.map((r) => r.result),
    );
    return out.results;
  }

  /**
   * A standing offer of a consumer elsewhere, if the batch starts with an
   * item that could be inserted claimed (due now, no idempotency key) and no
   * consumer of its queue shares this producer's channel (that one is asked
   * directly, for free). The ledger's eligibility check is the real one; this
   * only spares a Redis round trip when it cannot apply.
   */
  private async takeOffer(inputs: readonly EnqueueInput[]): Promise<TakenOffer | undefined> {
    const wake = this.options.wake;
    const queue = offerQueue(inputs);
    if (!wake || queue === undefined || wake.local.has(queue)) return undefined;
    return wake.offers.take(queue);
  }

  /** Slots of a local consumer for items the ledger may insert claimed, if they share one queue and class. */
  private localHandover(eligible: readonly ClaimCandidate[]): Reservation | undefined {
    const wake = this.options.wake;
    const first = eligible[0];
    if (!wake || !first) return undefined;
    if (eligible.some((c) => c.queue !== first.queue || c.queueClass !== first.queueClass)) return undefined;
    return wake.local.atInsert(first.queue, first.queueClass, new Set(eligible.map((c) => c.type)), eligible.length);
  }

  /**
   * Runs `fn` in a transaction on the caller's Kysely (same database as the
   * ledger): its writes and its enqueues commit together, and wake-ups go
   * out after the commit — or not at all if it rolls back.
   *
   * When the database rolls the transaction back on its own before it
   * commits (a deadlock, a lock wait timeout, a TiDB write conflict, or
   * TransactionRolledBackError from an enqueue inside it), the whole
   * transaction runs again, `fn` with it, up to TRANSACTION_RUNS times in
   * all, as a `db.transaction` user retrying deadlocks would. So `fn` may run
   * more than once: keep effects outside the database out of it. Any other
   * error rolls the transaction back and is thrown as it is.
   */
  async transaction<DB, T>(db: Kysely<DB>, fn: (tx: ProducerTransaction<DB>) => Promise<T>): Promise<T> {
    for (let run = 1; ; run++) {
      const pending: { inputs: readonly EnqueueInput[]; results: EnqueueResult[] }[] = [];
      const workflows: (() => Promise<void>)[] = [];
      let value: T;
      try {
        value = await db.transaction().execute(async (trx) => {
          const enqueueMany = async (inputs: readonly EnqueueInput[]): Promise<EnqueueResult[]> => {
            const results = await this.ledger.enqueueMany(inputs, { transaction: trx });
            pending.push({ inputs, results });
            return results;
          };
          return fn({
            trx,
            enqueueMany,
            workflow: async (input) => {
              const done = await this.workflowWithin(trx, input);
              workflows.push(done.publish);
              return done.result;
            },
            enqueue: async (input) => {
              markSingleEnqueue(input);
              const [r] = await enqueueMany([input]);
              if (!r) throw new Error('enqueue: no result');
              return r;
            },
          });
        });
      } catch (error) {
        if (
          run >= TRANSACTION_RUNS ||
          !(
            error instanceof TransactionRolledBackError ||
            error instanceof TransactionConflictError ||
            isRetryableConflict(error)
          )
        )
          throw error;
        await sleep(Math.random() * Math.min(200, 10 * 2 ** run), { keepAlive: true });
        continue;
      }
      for (const p of pending) await this.announce(p.inputs, p.results);
      for (const publish of workflows) await publish();
      return value;
    }
  }

  /**
   * For callers that own the transaction: enqueues inside `trx` and returns
   * the wake-ups to publish once the caller has committed.
   */
  async enqueueWithin(trx: Executor, inputs: readonly EnqueueInput[]): Promise<AfterCommit> {
    const results = await this.ledger.enqueueMany(inputs, { transaction: trx });
    return { results, publish: () => this.announce(inputs, results) };
  }

  /**
   * A workflow (docs/design/workflows.md): every job written in one transaction, all or nothing, idempotent by
   * `input.key`; the jobs without dependencies are announced after the commit. Bad input throws ValidationError
   * naming the field, writing nothing.
   */
  async workflow(input: WorkflowInput): Promise<WorkflowResult> {
    const done = await this.workflowWithin(undefined, input);
    await done.publish();
    return done.result;
  }

  /**
   * A workflow inside `trx` (the caller commits it; undefined: a transaction of its own), and the wake-ups of its
   * ready jobs to publish after the commit. `parentItem`: the item whose handler adds it (ctx.workflow).
   */
  async workflowWithin(
    trx: Executor | undefined,
    input: WorkflowInput,
    parentItem?: string,
  ): Promise<{ result: WorkflowResult; publish: () => Promise<void> }> {
    const result = await this.ledger.workflows.enqueue(input, { transaction: trx, parentItem });
    if (result.duplicate) return { result, publish: async () => undefined };
    const roots = workflowRoots(input, result);
    return { result, publish: () => this.announce(roots.inputs, roots.results) };
  }

  /**
   * The awaited fact has committed: every item blocked on `key` goes back to
   * pending, and the consumers (all of them, through the control stream) hear of it.
   */
  async wakeDependency(key: string, opts: { queue?: string } = {}): Promise<number> {
    const woken = await this.ledger.wakeDependency(key, opts);
    const wake = this.options.wake;
    if (wake && woken.length > 0) {
      for (const [queue, items] of groupBy(woken, (w) => w.queue)) {
        const ids = items.map((w) => w.id);
        await wake.publishControl(queue, { type: 'dependency', key, ids });
        await wake.publish([{ queue, queueClass: 'default', kind: 'dependency', ids }]);
      }
    }
    return woken.length;
  }

  /**
   * Cancels an item: a waiting one at once; a running one is asked to stop
   * (`cancel_requested`), and its holder hears of it on the control stream,
   * so its handler's signal aborts within milliseconds; without Redis (or if
   * the message is lost) the holder's next lease renewal finds the request.
   */
  async cancel(id: string, reason?: string): Promise<Awaited<ReturnType<Ledger['cancel']>>> {
    const outcome = await this.ledger.cancel(id, reason);
    const wake = this.options.wake;
    if (outcome === 'cancel_requested' && wake) {
      const item = await this.ledger.get(id);
      if (item?.state === 'processing') await wake.publishControl(item.queue, { type: 'cancel', ids: [id] });
    }
    return outcome;
  }

  /**
   * Pauses a queue: the ledger's flag first (it holds fleet-wide, with Redis
   * down too), then the queue's consumers are told on its control stream, so
   * they stop claiming now rather than at their next sweep.
   */
  async pause(queue: string): Promise<void> {
    await this.ledger.pause(queue);
    await this.options.wake?.publishControl(queue, { type: 'pause' });
  }

  /** Resumes a paused queue, and tells its consumers. */
  async resume(queue: string): Promise<void> {
    await this.ledger.resume(queue);
    await this.options.wake?.publishControl(queue, { type: 'resume' });
  }

  /**
   * A recurring schedule (cron `pattern` in time zone `tz`, or `everyMs`),
   * kept in the ledger (docs/design/wake.md, "Recurring schedules"): each fire
   * enqueues `item` with idempotency key `<name>:<fire time ms>`, in the
   * transaction that advances the schedule, so however many replicas fire
   * schedules, one item is made per fire. Any process running a consumer or
   * `lanewake worker` on this ledger fires it; Redis is not needed. Replaces
   * a schedule of the same name (keeping its next fire time if its timing is
   * unchanged, and its paused flag).
   */
  async schedule(schedule: RecurringSchedule): Promise<ScheduleView> {
    return this.ledger.schedules.upsert(schedule, 'api');
  }

  /** Removes a schedule: true if there was one. Items it already enqueued stay. */
  async unschedule(name: string): Promise<boolean> {
    return this.ledger.schedules.remove(name);
  }

  /** Operator re-drive of a dead or cancelled item; the new item is announced like any enqueue. */
  async replay(id: string, guard: { expectAttempt: number; expectErrorDigest: string }): Promise<{ id: string }> {
    const created = await this.ledger.replay(id, guard);
    const item = await this.ledger.get(created.id);
    if (item && this.options.wake) {
      await this.options.wake.publish([
        { queue: item.queue, queueClass: item.queueClass, kind: 'replay', ids: [item.id] },
      ]);
    }
    return created;
  }

  /** Operator repair in place (Ledger.repair); a repaired item that is its lane's head again is announced. */
  async repair(id: string, opts: Parameters<Ledger['repair']>[1]): Promise<Awaited<ReturnType<Ledger['repair']>>> {
    const repaired = await this.ledger.repair(id, opts);
    const wake = this.options.wake;
    if (wake && repaired.isHead && !repaired.duplicate) {
      const item = await this.ledger.get(id);
      if (item) await wake.publish([{ queue: item.queue, queueClass: item.queueClass, kind: 'replay', ids: [id] }]);
    }
    return repaired;
  }

  /**
   * Re-drives every dead item of the filter, each guarded as `replay` is
   * (ledger.operator.replayDead), announcing each batch's new items.
   */
  async replayDead(filter: DeadFilter): Promise<{ replayed: number; skipped: number }> {
    const wake = this.options.wake;
    return this.ledger.operator.replayDead(filter, async (created) => {
      if (!wake) return;
      const byClass = groupBy(created, (c) => c.queueClass);
      await wake.publish(
        [...byClass].map(([queueClass, items]) => ({
          queue: filter.queue,
          queueClass,
          kind: 'replay' as const,
          ids: items.map((c) => c.id),
        })),
      );
    });
  }

  private async announce(inputs: readonly EnqueueInput[], results: readonly EnqueueResult[]): Promise<void> {
    const wake = this.options.wake;
    if (!wake) return;
    const now = Date.now();
    const dueByStream = new Map<string, { queue: string; queueClass: QueueClass; ids: string[] }>();
    const timers: WakeTimer[] = [];
    inputs.forEach((input, i) => {
      const r = results[i];
      if (!r || r.duplicate) return;
      const queueClass = input.queueClass ?? 'default';
      const runAt = input.runAt ?? (input.delayMs ? new Date(now + input.delayMs) : undefined);
      if (runAt !== undefined && runAt.getTime() > now) {
        timers.push({ queue: input.queue, queueClass, itemId: r.id, attempt: 0, runAt });
        return;
      }
      const k = `${input.queue}|${queueClass}`;
      const group = dueByStream.get(k) ?? { queue: input.queue, queueClass, ids: [] };
      group.ids.push(r.id);
      dueByStream.set(k, group);
    });
    // One entry per committed batch and stream; a consumer that finds more
    // heads than it can take passes the wake-up on.
    await wake.publish([...dueByStream.values()].map((g) => ({ ...g, kind: 'enqueue' as const, enqueuedAtMs: now })));
    await wake.scheduleTimers(timers);
  }
}
