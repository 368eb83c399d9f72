import { sql, type RawBuilder } from 'kysely';
import type { LedgerDb } from './connection.js';
import type { LedgerTables } from './tables.js';

/**
 * One schema step. Every statement must be safe to run again (CREATE … IF NOT
 * EXISTS), so a crash between a step and its bookkeeping row heals on the
 * next run. Indexes are declared inside CREATE TABLE because MySQL 8 has no
 * CREATE INDEX IF NOT EXISTS.
 */
export interface Migration {
  version: number;
  name: string;
  statements: (t: LedgerTables) => RawBuilder<unknown>[];
  /** Steps that depend on what is there (MySQL 8 has no ADD/DROP INDEX IF [NOT] EXISTS); run after `statements`. */
  run?: (conn: LedgerDb, t: LedgerTables, prefix: string) => Promise<void>;
}

// ASCII columns for ids, tokens, names: every secondary index stays small.
export const ASCII = sql`CHARACTER SET ascii COLLATE ascii_bin`;
export const TEXT = sql`CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`;

/** The first schema step: the ledger's tables as version 1 made them. */
export const INITIAL_MIGRATION: Migration = {
  version: 1,
  name: 'items, lanes, attempts, ownership',
  statements: (t) => [
    sql`CREATE TABLE IF NOT EXISTS ${t.items} (
        id VARCHAR(32) ${ASCII} NOT NULL,
        queue VARCHAR(64) ${ASCII} NOT NULL,
        type VARCHAR(128) ${ASCII} NOT NULL,
        lane VARCHAR(255) ${TEXT} NULL,
        lane_seq BIGINT NULL,
        is_head TINYINT NOT NULL DEFAULT 1,
        queue_class VARCHAR(16) ${ASCII} NOT NULL DEFAULT 'default',
        priority INT NOT NULL DEFAULT 0,
        payload LONGTEXT ${TEXT} NOT NULL,
        state VARCHAR(16) ${ASCII} NOT NULL,
        run_after DATETIME(6) NOT NULL,
        attempt INT NOT NULL DEFAULT 0,
        max_attempts INT NOT NULL,
        lease_owner VARCHAR(128) ${TEXT} NULL,
        lease_token VARCHAR(32) ${ASCII} NULL,
        lease_until DATETIME(6) NULL,
        epoch BIGINT NULL,
        idempotency_key VARCHAR(255) ${TEXT} NULL,
        dependency_key VARCHAR(255) ${TEXT} NULL,
        probe_after DATETIME(6) NULL,
        blocked_at DATETIME(6) NULL,
        block_expires_at DATETIME(6) NULL,
        cancel_requested TINYINT NOT NULL DEFAULT 0,
        checkpoint LONGTEXT ${TEXT} NULL,
        result LONGTEXT ${TEXT} NULL,
        last_error TEXT ${TEXT} NULL,
        failure_class VARCHAR(64) ${ASCII} NULL,
        replay_of VARCHAR(32) ${ASCII} NULL,
        replayed_at DATETIME(6) NULL,
        created_at DATETIME(6) NOT NULL,
        started_at DATETIME(6) NULL,
        terminal_at DATETIME(6) NULL,
        updated_at DATETIME(6) NOT NULL,
        PRIMARY KEY (id) /*T![clustered_index] CLUSTERED */,
        KEY ix_claim (queue, queue_class, state, is_head, priority, run_after),
        UNIQUE KEY ux_idempotency (queue, idempotency_key),
        KEY ix_dependency (dependency_key),
        KEY ix_lane (queue, lane, lane_seq),
        KEY ix_terminal (terminal_at),
        KEY ix_probe (probe_after)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    // One row per lane that has ever had an item: the gap-free sequence and
    // (until schema 5) how many of its items were not terminal yet.
    sql`CREATE TABLE IF NOT EXISTS ${t.lanes} (
        queue VARCHAR(64) ${ASCII} NOT NULL,
        lane VARCHAR(255) ${TEXT} NOT NULL,
        next_seq BIGINT NOT NULL,
        active BIGINT NOT NULL,
        PRIMARY KEY (queue, lane) /*T![clustered_index] NONCLUSTERED */
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin /*T! SHARD_ROW_ID_BITS=4 */`,
    sql`CREATE TABLE IF NOT EXISTS ${t.attempts} (
        id VARCHAR(32) ${ASCII} NOT NULL,
        item_id VARCHAR(32) ${ASCII} NOT NULL,
        attempt INT NOT NULL,
        outcome VARCHAR(16) ${ASCII} NOT NULL,
        failure_class VARCHAR(64) ${ASCII} NULL,
        error TEXT ${TEXT} NULL,
        worker VARCHAR(128) ${TEXT} NULL,
        started_at DATETIME(6) NULL,
        ended_at DATETIME(6) NOT NULL,
        PRIMARY KEY (id) /*T![clustered_index] NONCLUSTERED */,
        KEY ix_item (item_id, ended_at)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin /*T! SHARD_ROW_ID_BITS=4 */`,
    sql`CREATE TABLE IF NOT EXISTS ${t.ownership} (
        queue VARCHAR(64) ${ASCII} NOT NULL,
        deployment VARCHAR(128) ${TEXT} NOT NULL,
        epoch BIGINT NOT NULL,
        activated_at DATETIME(6) NOT NULL,
        PRIMARY KEY (queue)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
  ],
};
