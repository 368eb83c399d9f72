import { WorkflowConflictError } from '../errors.js';
import type { Executor } from './connection.js';
import type { EnqueueTarget } from './enqueue-items.js';
import { newItemId } from './ids.js';
import type { EnqueueOptions } from './inputs.js';
import { modeProof } from './mode-proof.js';
import { ER_DUP_ENTRY, errno, retryTransaction } from './retry.js';
import { insertItems } from './sql/enqueue/insert.js';
import { insertEdges, insertJobRows, insertWorkflowRow, workflowByKey } from './sql/workflows/insert.js';
import { cancelWorkflowJobs, dependencyPage, workflowView } from './sql/workflows/read.js';
import { prepareWorkflow, type PreparedWorkflow } from './workflow-input.js';
import type { DependencyPage, WorkflowInput, WorkflowResult, WorkflowView } from './workflow-types.js';

/** The most dependencies one page of `dependencies` returns. */
export const MAX_DEPENDENCY_PAGE = 1000;

/**
 * Workflows (docs/design/workflows.md): jobs that run after other jobs, enqueued all or nothing. Settling a job's
 * dependents happens in the transaction that ends it (sql/workflows/settle.ts).
 */
export class LedgerWorkflows {
  constructor(private readonly target: EnqueueTarget) {}

  /**
   * Enqueues a workflow: its row, every job's item, the jobs' counters and the edges, in one transaction (the
   * caller's, with `opts.transaction`). Jobs without dependencies are claimable at once; the others wait unseen by
   * claims. Bad input throws ValidationError naming the field, writing nothing; a key of a different definition
   * throws WorkflowConflictError.
   */
  async enqueue(input: WorkflowInput, opts: EnqueueOptions & { parentItem?: string } = {}): Promise<WorkflowResult> {
    const plan = prepareWorkflow(this.target, input);
    const caller = opts.transaction === undefined ? undefined : modeProof(opts.transaction);
    await this.target.gate.check(plan.items, false, caller);
    const parentItem = opts.parentItem ?? null;
    if (caller !== undefined) return this.write(caller, plan, parentItem, this.target.db);
    return retryTransaction(
      this.target.db,
      (trx) => this.write(trx, plan, parentItem, false),
      (e) => errno(e) === ER_DUP_ENTRY,
    );
  }

  /** One page of an item's dependencies: each parent's name, id, state and result (or error). */
  dependencies(itemId: string, page: { after?: string | null; limit?: number } = {}): Promise<DependencyPage> {
    const limit = Math.max(1, Math.min(page.limit ?? 100, MAX_DEPENDENCY_PAGE));
    return dependencyPage(this.target.db, this.target.tables, itemId, page.after ?? null, limit);
  }

  /** A workflow and each job's state; undefined when no workflow has this id. */
  get(id: string): Promise<WorkflowView | undefined> {
    return workflowView(this.target.db, this.target.tables, id);
  }

  /** Cancels the workflow's jobs not started (dependents of running ones included); undefined: no such workflow. */
  cancel(id: string): Promise<number | undefined> {
    return retryTransaction(this.target.db, (trx) => cancelWorkflowJobs(trx, this.target.tables, id));
  }

  /**
   * The writes of one workflow. A key already taken answers the stored workflow (`keysFrom` reads it outside the
   * caller's transaction, whose snapshot may predate the winner's commit).
   */
  private async write(
    exec: Executor,
    plan: PreparedWorkflow,
    parentItem: string | null,
    keysFrom: Executor | false,
  ): Promise<WorkflowResult> {
    const { tables: t } = this.target;
    if (plan.key !== null) {
      const found = await workflowByKey(keysFrom === false ? exec : keysFrom, t, plan.key);
      if (found !== undefined) return this.duplicate(plan, found);
    }
    const id = newItemId((await this.target.capabilities()).idOrder);
    try {
      await insertWorkflowRow(exec, t, {
        id,
        key: plan.key,
        name: plan.name,
        onFailure: plan.onFailure,
        jobs: plan.names.length,
        digest: plan.digest,
        parentItem,
      });
    } catch (error) {
      // Another enqueue of the key committed first (this statement failed alone, the transaction goes on).
      if (errno(error) !== ER_DUP_ENTRY || plan.key === null) throw error;
      const found = await workflowByKey(this.target.db, t, plan.key);
      if (found === undefined) throw error;
      return this.duplicate(plan, found);
    }
    for (const item of plan.items) item.workflowId = id;
    const order = (await this.target.capabilities()).idOrder;
    const results = await insertItems(exec, t, plan.items, false, order, { batch: true, digests: false });
    const ids = results.map((r) => r.id);
    await insertJobRows(
      exec,
      t,
      id,
      plan.names.map((name, i) => ({
        itemId: ids[i]!,
        name,
        depsPending: plan.parents[i]!.length,
        onFailure: plan.policies[i]!,
      })),
    );
    await insertEdges(
      exec,
      t,
      plan.parents.flatMap((ps, child) => ps.map((p) => ({ parent: ids[p]!, child: ids[child]! }))),
    );
    return { id, duplicate: false, jobs: Object.fromEntries(plan.names.map((n, i) => [n, ids[i]!])) };
  }

  private duplicate(
    plan: PreparedWorkflow,
    found: { id: string; digest: string; jobs: Record<string, string> },
  ): WorkflowResult {
    if (found.digest !== plan.digest) throw new WorkflowConflictError(plan.key ?? '', found.id);
    return { id: found.id, duplicate: true, jobs: found.jobs };
  }
}
