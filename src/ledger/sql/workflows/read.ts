import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { parseJson } from '../../rows.js';
import type { ItemState } from '../../types.js';
import type { DependencyPage, WorkflowView } from '../../workflow-types.js';

/**
 * One page of an item's dependencies (its parents in its workflow), in item id order after `after`: the fan-in's
 * view of what it waited for. Reads the edges' child index and each parent by primary key.
 */
export async function dependencyPage(
  exec: Executor,
  t: LedgerTables,
  itemId: string,
  after: string | null,
  limit: number,
): Promise<DependencyPage> {
  const r = await sql<{
    id: string;
    name: string;
    type: string;
    state: string;
    result: string | null;
    last_error: string | null;
    failure_class: string | null;
  }>`SELECT i.id, j.name, i.type, i.state, i.result, i.last_error, i.failure_class
    FROM ${t.workflowEdges} e
    JOIN ${t.items} i ON i.id = e.parent_id
    JOIN ${t.workflowJobs} j ON j.item_id = e.parent_id
    WHERE e.child_id = ${itemId} AND e.parent_id > ${after ?? ''}
    ORDER BY e.parent_id LIMIT ${limit + 1}`.execute(exec);
  const rows = r.rows.slice(0, limit);
  return {
    dependencies: rows.map((row) => ({
      name: row.name,
      id: row.id,
      type: row.type,
      state: row.state as ItemState,
      result: parseJson(row.result),
      error: row.last_error,
      failureClass: row.failure_class,
    })),
    next: r.rows.length > limit ? (rows[rows.length - 1]?.id ?? null) : null,
  };
}

/** A workflow with each job's state and dependencies, or undefined. */
export async function workflowView(exec: Executor, t: LedgerTables, id: string): Promise<WorkflowView | undefined> {
  const w = await sql<{
    id: string;
    idempotency_key: string | null;
    name: string;
    state: string;
    on_failure: string;
    parent_item: string | null;
    created_at: Date;
  }>`SELECT id, idempotency_key, name, state, on_failure, parent_item, created_at FROM ${t.workflows}
    WHERE id = ${id}`.execute(exec);
  const row = w.rows[0];
  if (row === undefined) return undefined;
  const jobs = await sql<{
    item_id: string;
    name: string;
    deps_pending: number;
    deps_failed: number;
    on_failure: string;
    queue: string;
    type: string;
    state: string;
    is_head: number;
  }>`SELECT j.item_id, j.name, j.deps_pending, j.deps_failed, j.on_failure, i.queue, i.type, i.state, i.is_head
    FROM ${t.workflowJobs} j JOIN ${t.items} i ON i.id = j.item_id
    WHERE j.workflow_id = ${id} ORDER BY j.name`.execute(exec);
  const ids = jobs.rows.map((j) => j.item_id);
  const nameOf = new Map(jobs.rows.map((j) => [j.item_id, j.name]));
  const after = new Map<string, string[]>();
  for (let i = 0; i < ids.length; i += 1000) {
    const edges = await sql<{ parent_id: string; child_id: string }>`SELECT parent_id, child_id
      FROM ${t.workflowEdges} WHERE child_id IN (${sql.join(ids.slice(i, i + 1000))})`.execute(exec);
    for (const e of edges.rows)
      after.set(e.child_id, [...(after.get(e.child_id) ?? []), nameOf.get(e.parent_id) ?? '?']);
  }
  return {
    id: row.id,
    key: row.idempotency_key,
    name: row.name,
    state: row.state as WorkflowView['state'],
    onFailure: row.on_failure as WorkflowView['onFailure'],
    parentItem: row.parent_item,
    createdAt: row.created_at,
    jobs: jobs.rows.map((j) => ({
      name: j.name,
      id: j.item_id,
      queue: j.queue,
      type: j.type,
      // A pending job that is not its own head is waiting for its dependencies.
      state: j.state === 'pending' && Number(j.is_head) === 0 ? 'waiting' : (j.state as ItemState),
      after: (after.get(j.item_id) ?? []).sort(),
      depsPending: Number(j.deps_pending),
      depsFailed: Number(j.deps_failed),
      onFailure: j.on_failure as WorkflowView['onFailure'],
    })),
  };
}

/**
 * Cancels a workflow: its row says so, and every job not started (pending, waiting or claimable) is cancelled, in
 * one transaction. Jobs running finish as they will; their dependents were cancelled with the rest.
 * Returns how many jobs it cancelled, or undefined for an unknown workflow.
 */
export async function cancelWorkflowJobs(exec: Executor, t: LedgerTables, id: string): Promise<number | undefined> {
  const w = await sql<{ id: string }>`SELECT id FROM ${t.workflows} WHERE id = ${id} FOR UPDATE`.execute(exec);
  if (w.rows.length === 0) return undefined;
  await sql`UPDATE ${t.workflows} SET state = 'cancelled', updated_at = NOW(6) WHERE id = ${id}`.execute(exec);
  const jobs = await sql<{ item_id: string }>`SELECT item_id FROM ${t.workflowJobs}
    WHERE workflow_id = ${id}`.execute(exec);
  let cancelled = 0;
  for (let i = 0; i < jobs.rows.length; i += 1000) {
    const ids = jobs.rows.slice(i, i + 1000).map((j) => j.item_id);
    const r = await sql`UPDATE ${t.items} SET state = 'cancelled', failure_class = 'cancelled',
        last_error = 'workflow cancelled', terminal_at = NOW(6), updated_at = NOW(6)
      WHERE id IN (${sql.join(ids)}) AND state = 'pending'`.execute(exec);
    cancelled += Number(r.numAffectedRows ?? 0n);
  }
  return cancelled;
}
