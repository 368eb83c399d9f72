import { sql } from 'kysely';
import { ASCII, TEXT, type Migration } from './migration-initial.js';

/**
 * Schema 17, workflows (docs/design/workflows.md): jobs that wait on other jobs.
 *
 * - `workflows`: one row per workflow, its idempotency key (unique) and the digest of its definition.
 * - `workflow_jobs`: one row per job of a workflow, keyed by its item: its name, how many of its dependencies
 *   have not settled (`deps_pending`), how many ended unsuccessfully (`deps_failed`), and its failure policy.
 * - `workflow_edges`: one row per dependency, parent item -> dependent item. Settling a parent reads its own
 *   edges (the primary key's prefix) and changes one counter per edge: no scan of siblings.
 * - `items.workflow_id`: set on a workflow's items only, so a finish knows, from the claim it holds, whether it
 *   has dependents to settle. Nullable, at the end of the row: MariaDB adds it instantly, TiDB without a backfill.
 *
 * A job that waits is `pending` with `is_head = 0` and no lane or key: outside the claim index's range, as a
 * lane's non-heads are. Its own file so that steps numbered by other branches merge beside it.
 */
export const WORKFLOWS_MIGRATION: Migration = {
  version: 17,
  name: 'workflows',
  statements: (t) => [
    sql`CREATE TABLE IF NOT EXISTS ${t.workflows} (
        id VARCHAR(32) ${ASCII} NOT NULL,
        idempotency_key VARCHAR(255) ${TEXT} NULL,
        name VARCHAR(128) ${TEXT} NOT NULL,
        state VARCHAR(12) ${ASCII} NOT NULL,
        on_failure VARCHAR(8) ${ASCII} NOT NULL,
        jobs INT NOT NULL,
        request_digest BINARY(16) NOT NULL,
        parent_item VARCHAR(32) ${ASCII} NULL,
        created_at DATETIME(6) NOT NULL,
        updated_at DATETIME(6) NOT NULL,
        PRIMARY KEY (id) /*T![clustered_index] CLUSTERED */,
        UNIQUE KEY ux_idempotency (idempotency_key)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    sql`CREATE TABLE IF NOT EXISTS ${t.workflowJobs} (
        item_id VARCHAR(32) ${ASCII} NOT NULL,
        workflow_id VARCHAR(32) ${ASCII} NOT NULL,
        name VARCHAR(128) ${TEXT} NOT NULL,
        deps_pending INT NOT NULL,
        deps_failed INT NOT NULL DEFAULT 0,
        on_failure VARCHAR(8) ${ASCII} NOT NULL,
        PRIMARY KEY (item_id) /*T![clustered_index] CLUSTERED */,
        UNIQUE KEY ux_name (workflow_id, name)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    sql`CREATE TABLE IF NOT EXISTS ${t.workflowEdges} (
        parent_id VARCHAR(32) ${ASCII} NOT NULL,
        child_id VARCHAR(32) ${ASCII} NOT NULL,
        PRIMARY KEY (parent_id, child_id) /*T![clustered_index] CLUSTERED */,
        KEY ix_child (child_id, parent_id)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ],
  run: async (conn, t, prefix) => {
    const r = await sql<{ name: string }>`SELECT column_name AS name FROM information_schema.columns
      WHERE table_schema = DATABASE() AND table_name = ${prefix + 'items'}`.execute(conn);
    const columns = new Set(r.rows.map((x) => String(x.name).toLowerCase()));
    if (!columns.has('workflow_id'))
      await sql`ALTER TABLE ${t.items} ADD COLUMN workflow_id VARCHAR(32) ${ASCII} NULL`.execute(conn);
  },
};
