import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { affected, list } from '../common/fragments.js';

/** How a workflow's job ended, for its dependents: completed or skipped, or dead or cancelled. */
export type JobEnd = 'succeeded' | 'failed';

/** A workflow's job that just ended, in the transaction that ended it. */
export interface EndedJob {
  id: string;
  end: JobEnd;
}

/** What settling changed: how many dependents it made claimable, and those the `cancel` policy cancelled. */
export interface Settled {
  released: number;
  cancelled: string[];
}

/** The end a terminal state means to a dependent. */
export function jobEnd(state: 'completed' | 'skipped' | 'dead' | 'cancelled'): JobEnd {
  return state === 'completed' || state === 'skipped' ? 'succeeded' : 'failed';
}

interface EdgeRow {
  parent_id: string;
  child_id: string;
  on_failure: string;
}

/**
 * Settles the dependents of `ended`, in the transaction that ended them (docs/design/workflows.md). Per edge: one
 * decrement of the dependent's `deps_pending` (and, for a failed parent, `deps_failed`); a dependent whose count
 * reaches 0 becomes its own head, so claims see it. A failed parent's dependents under the `cancel` policy are
 * cancelled instead, and their own dependents settled in turn (cascading). Reads only the ended items' edges:
 * a parent's cost is its own dependents, never its siblings.
 */
export async function settleDependents(exec: Executor, t: LedgerTables, ended: readonly EndedJob[]): Promise<Settled> {
  const out: Settled = { released: 0, cancelled: [] };
  let wave = [...ended];
  while (wave.length > 0) {
    const endOf = new Map(wave.map((e) => [e.id, e.end]));
    const edges = await sql<EdgeRow>`SELECT e.parent_id, e.child_id, j.on_failure FROM ${t.workflowEdges} e
      JOIN ${t.workflowJobs} j ON j.item_id = e.child_id
      WHERE e.parent_id IN (${list([...endOf.keys()])}) ORDER BY e.child_id`.execute(exec);
    const counts = new Map<string, { done: number; failed: number; cancel: boolean }>();
    for (const e of edges.rows) {
      const failed = endOf.get(e.parent_id) === 'failed';
      const c = counts.get(e.child_id) ?? { done: 0, failed: 0, cancel: false };
      c.done++;
      if (failed) c.failed++;
      if (failed && e.on_failure === 'cancel') c.cancel = true;
      counts.set(e.child_id, c);
    }
    const next: EndedJob[] = [];
    const toCancel = [...counts].filter(([, c]) => c.cancel).map(([id]) => id);
    if (toCancel.length > 0) {
      const cancelled = await cancelWaiting(exec, t, toCancel);
      out.cancelled.push(...cancelled);
      next.push(...cancelled.map((id) => ({ id, end: 'failed' as const })));
    }
    // One UPDATE per distinct (done, failed) pair: in a DAG's common case, one for every dependent at once.
    const byDelta = new Map<string, string[]>();
    for (const [id, c] of counts) {
      if (c.cancel) continue;
      const k = `${c.done}:${c.failed}`;
      byDelta.set(k, [...(byDelta.get(k) ?? []), id]);
    }
    const touched: string[] = [];
    for (const [k, ids] of byDelta) {
      const [done, failed] = k.split(':').map(Number) as [number, number];
      await sql`UPDATE ${t.workflowJobs}
        SET deps_pending = deps_pending - ${done}, deps_failed = deps_failed + ${failed}
        WHERE item_id IN (${list(ids)})`.execute(exec);
      touched.push(...ids);
    }
    if (touched.length > 0) out.released += await releaseReady(exec, t, touched);
    wave = next;
  }
  return out;
}

/**
 * Of `ids` (dependents whose counters this transaction just changed, so holds locked), those at 0 become claimable:
 * one statement, so the busiest row (a large fan-in's counter) is held the shortest time before COMMIT. Returns how
 * many it released.
 */
async function releaseReady(exec: Executor, t: LedgerTables, ids: readonly string[]): Promise<number> {
  // Due no earlier than now: a job that waited competes from when it became ready, not from its enqueue.
  const r = await sql`UPDATE ${t.items} SET is_head = 1, run_after = GREATEST(run_after, NOW(6)), updated_at = NOW(6)
    WHERE id IN (${list(ids)}) AND state = 'pending' AND is_head = 0
      AND id IN (SELECT item_id FROM ${t.workflowJobs} WHERE item_id IN (${list(ids)}) AND deps_pending <= 0)`.execute(
    exec,
  );
  return affected(r);
}

/** Cancels those of `ids` still waiting (the `cancel` policy); returns the ones this call cancelled. */
async function cancelWaiting(exec: Executor, t: LedgerTables, ids: readonly string[]): Promise<string[]> {
  const waiting = await sql<{ id: string }>`SELECT id FROM ${t.items}
    WHERE id IN (${list(ids)}) AND state = 'pending' AND is_head = 0 FOR UPDATE`.execute(exec);
  if (waiting.rows.length === 0) return [];
  const found = waiting.rows.map((r) => r.id);
  await sql`UPDATE ${t.items} SET state = 'cancelled', failure_class = 'dependency_failed',
      last_error = 'a dependency ended dead or cancelled', terminal_at = NOW(6), updated_at = NOW(6)
    WHERE id IN (${list(found)}) AND state = 'pending' AND is_head = 0`.execute(exec);
  return found;
}
