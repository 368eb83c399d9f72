import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { literal } from '../common/fragments.js';

/** A workflow's row as enqueue writes it. */
export interface WorkflowRow {
  id: string;
  key: string | null;
  name: string;
  onFailure: string;
  jobs: number;
  /** Hex, 32 digits: the digest of the definition (workflow-input.ts). */
  digest: string;
  parentItem: string | null;
}

/** One job of a workflow: its item, name, how many dependencies it waits for, and its failure policy. */
export interface WorkflowJobRow {
  itemId: string;
  name: string;
  depsPending: number;
  onFailure: string;
}

/** Rows per multi-row INSERT of jobs or edges: small rows, so a statement stays far under max_allowed_packet. */
const ROWS_PER_STATEMENT = 2000;

export async function insertWorkflowRow(exec: Executor, t: LedgerTables, w: WorkflowRow): Promise<void> {
  await sql`INSERT INTO ${t.workflows} (id, idempotency_key, name, state, on_failure, jobs, request_digest,
      parent_item, created_at, updated_at)
    VALUES (${w.id}, ${w.key}, ${w.name}, 'running', ${w.onFailure}, ${w.jobs}, UNHEX(${w.digest}), ${w.parentItem},
      NOW(6), NOW(6))`.execute(exec);
}

/** The workflow an idempotency key names, if any: its id and digest, and its jobs' item ids by name. */
export async function workflowByKey(
  exec: Executor,
  t: LedgerTables,
  key: string,
): Promise<{ id: string; digest: string; jobs: Record<string, string> } | undefined> {
  const r = await sql<{ id: string; digest: string }>`SELECT id, LOWER(HEX(request_digest)) AS digest
    FROM ${t.workflows} WHERE idempotency_key = ${key}`.execute(exec);
  const row = r.rows[0];
  if (row === undefined) return undefined;
  const jobs = await sql<{ name: string; item_id: string }>`SELECT name, item_id FROM ${t.workflowJobs}
    WHERE workflow_id = ${row.id}`.execute(exec);
  return { id: row.id, digest: row.digest, jobs: Object.fromEntries(jobs.rows.map((j) => [j.name, j.item_id])) };
}

export async function insertJobRows(
  exec: Executor,
  t: LedgerTables,
  workflowId: string,
  rows: readonly WorkflowJobRow[],
): Promise<void> {
  for (let i = 0; i < rows.length; i += ROWS_PER_STATEMENT) {
    const values = rows
      .slice(i, i + ROWS_PER_STATEMENT)
      .map(
        (r) =>
          `(${literal(r.itemId)}, ${literal(workflowId)}, ${literal(r.name)}, ${r.depsPending}, 0, ${literal(
            r.onFailure,
          )})`,
      );
    await sql`INSERT INTO ${t.workflowJobs} (item_id, workflow_id, name, deps_pending, deps_failed, on_failure)
      VALUES ${sql.raw(values.join(', '))}`.execute(exec);
  }
}

/** The dependency edges, parent item -> dependent item. */
export async function insertEdges(
  exec: Executor,
  t: LedgerTables,
  edges: readonly { parent: string; child: string }[],
): Promise<void> {
  for (let i = 0; i < edges.length; i += ROWS_PER_STATEMENT) {
    const values = edges.slice(i, i + ROWS_PER_STATEMENT).map((e) => `(${literal(e.parent)}, ${literal(e.child)})`);
    await sql`INSERT INTO ${t.workflowEdges} (parent_id, child_id) VALUES ${sql.raw(values.join(', '))}`.execute(exec);
  }
}
