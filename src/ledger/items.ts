import type { LedgerCore } from './core.js';
import { explainItem } from './explain.js';
import { newId } from './ids.js';
import { listDeadSchema, repairSchema, replaySchema, wakeDependencySchema } from './inputs.js';
import { parseJson } from './rows.js';
import { cancelItem } from './sql/operator/cancel.js';
import { getAttempts, getItem, listDead } from './sql/operator/inspect.js';
import { repairItem } from './sql/operator/repair.js';
import { replayItem } from './sql/operator/replay.js';
import { queueStats } from './sql/operator/stats.js';
import { readSteps } from './sql/run/steps.js';
import { wakeDependency } from './sql/waits/dependency.js';
import type { AttemptRecord, CancelOutcome, QueueStats, RepairResult, StepRecord, WorkItem } from './types.js';
import type { WokenItem } from './upkeep-types.js';
import type { Explanation } from './operator-types.js';
import { itemId, queueName, reasonText, validate } from './validation.js';

/** Items by id, for a program or an operator: reads, cancel, replay, repair, dependency wake-ups, queue depth. */
export class LedgerItems {
  constructor(private readonly core: LedgerCore) {}

  get(id: string): Promise<WorkItem | undefined> {
    validate(itemId, id, 'get', 'id');
    return getItem(this.core.db, this.core.tables, id);
  }

  listDead(opts: { queue?: string; limit?: number } = {}): Promise<WorkItem[]> {
    const v = validate(listDeadSchema, opts, 'listDead');
    return listDead(this.core.db, this.core.tables, v);
  }

  /** The durable steps item `id` has done (ctx.step), in the order they were done. */
  async steps(id: string): Promise<StepRecord[]> {
    validate(itemId, id, 'steps', 'id');
    // A step whose fn returned undefined stored no result, and gives undefined back.
    return (await readSteps(this.core.db, this.core.tables, id)).map(({ resultJson, ...s }) => ({
      ...s,
      result: resultJson === null ? undefined : parseJson(resultJson),
    }));
  }

  /** An item, its attempt history and its durable steps, for an operator. */
  async inspect(id: string): Promise<{ item: WorkItem; attempts: AttemptRecord[]; steps: StepRecord[] } | undefined> {
    validate(itemId, id, 'inspect', 'id');
    const item = await getItem(this.core.db, this.core.tables, id);
    if (!item) return undefined;
    const [attempts, steps] = await Promise.all([getAttempts(this.core.db, this.core.tables, id), this.steps(id)]);
    return { item, attempts, steps };
  }

  /**
   * Why an item is where it is: a reason code, a sentence and its facts (docs/design/supervisor.md, "Why isn't it
   * running?").
   */
  explain(id: string): Promise<Explanation | undefined> {
    validate(itemId, id, 'explain', 'id');
    return explainItem(this.core.db, this.core.tables, id);
  }

  /** Depth by state per queue, counted now from bounded index ranges (src/ledger/sql/operator/stats.ts). */
  stats(queue?: string): Promise<QueueStats[]> {
    if (queue !== undefined) validate(queueName, queue, 'stats', 'queue');
    return queueStats(this.core.db, this.core.tables, queue);
  }

  wakeDependency(key: string, opts: { queue?: string } = {}): Promise<WokenItem[]> {
    const v = validate(wakeDependencySchema, { key, ...opts }, 'wakeDependency');
    return wakeDependency(this.core.db, this.core.tables, v);
  }

  cancel(id: string, reason?: string): Promise<CancelOutcome> {
    validate(itemId, id, 'cancel', 'id');
    if (reason !== undefined) validate(reasonText, reason, 'cancel', 'reason');
    return cancelItem(this.core.db, this.core.tables, id, reason ?? null);
  }

  /** Re-drives a dead or cancelled item as a new item; guarded by the attempt and error digest the operator saw. */
  replay(id: string, guard: { expectAttempt: number; expectErrorDigest: string }): Promise<{ id: string }> {
    const v = validate(replaySchema, { id, ...guard }, 'replay');
    return this.core.capabilities().then((caps) => replayItem(this.core.db, this.core.tables, v, caps.idOrder));
  }

  /**
   * Repairs a dead or cancelled item in place (docs/design/states.md, Repair):
   * back to pending as itself, with its id, lane place and idempotency key,
   * its checkpoint and steps, and a fresh attempt budget (attempt 0 of its
   * maxAttempts). Guarded as `replay` is, by the attempt count and the error
   * digest the operator saw; `reason` and `actor` go into its history, on a
   * row whose id is the repair id (given, to make a repeated call safe, or
   * made). Refused with RepairRejectedError (nothing written) when the guard
   * does not hold, the item was replayed, or its lane's head is running.
   */
  async repair(
    id: string,
    opts: { expectAttempt: number; expectErrorDigest: string; reason: string; actor: string; repairId?: string },
  ): Promise<RepairResult> {
    const v = validate(repairSchema, { id, ...opts }, 'repair');
    return repairItem(this.core.db, this.core.tables, { ...v, repairId: v.repairId ?? newId() });
  }
}
