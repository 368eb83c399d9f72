import { sql, type RawBuilder } from 'kysely';
import type { LedgerDb } from './connection.js';
import { NO_TIME, OWNER_WIDTH } from './sql/common/fragments.js';
import { ASCII, INITIAL_MIGRATION, TEXT, type Migration } from './migration-initial.js';
import { DRAIN_ONLY_MIGRATION } from './migration-drain-only.js';
import { WORKFLOWS_MIGRATION } from './migration-workflows.js';
import { QUEUE_SETTINGS_MIGRATION } from './migration-queue-settings.js';

/** Every schema step, in order: the ledger's schema is the last one's version. */
export const MIGRATIONS: readonly Migration[] = [
  INITIAL_MIGRATION,
  {
    version: 2,
    name: 'fixed-width lease columns; purge by creation time',
    // Claim and completion write state, the lease token, owner and expiry, and
    // the start and terminal times. Each used to go NULL → value or change
    // length, and InnoDB then rewrites the row instead of updating it in
    // place; completion also moved the row's terminal-time index entry
    // (docs/BENCHMARKS.md).
    statements: (t) => [
      // NOT NULL needs the NULLs gone first; owners fold to what the new column holds.
      sql`UPDATE ${t.items} SET lease_token = COALESCE(lease_token, ''),
        lease_owner = COALESCE(REGEXP_REPLACE(LEFT(lease_owner, ${sql.raw(String(OWNER_WIDTH))}), '[^ -~]', '?'), ''),
        lease_until = COALESCE(lease_until, ${NO_TIME}), started_at = COALESCE(started_at, ${NO_TIME}),
        terminal_at = COALESCE(terminal_at, ${NO_TIME})
        WHERE lease_token IS NULL OR lease_owner IS NULL OR lease_until IS NULL OR started_at IS NULL
          OR terminal_at IS NULL
          OR lease_owner REGEXP '[^ -~]' OR CHAR_LENGTH(lease_owner) > ${sql.raw(String(OWNER_WIDTH))}`,
      sql`ALTER TABLE ${t.items}
        MODIFY state CHAR(12) ${ASCII} NOT NULL,
        MODIFY lease_token CHAR(32) ${ASCII} NOT NULL DEFAULT '',
        MODIFY lease_owner CHAR(${sql.raw(String(OWNER_WIDTH))}) ${ASCII} NOT NULL DEFAULT '',
        MODIFY lease_until DATETIME(6) NOT NULL DEFAULT ${NO_TIME},
        MODIFY started_at DATETIME(6) NOT NULL DEFAULT ${NO_TIME},
        MODIFY terminal_at DATETIME(6) NOT NULL DEFAULT ${NO_TIME}`,
    ],
    run: async (conn, t, prefix) => {
      const indexes = await indexNames(conn, prefix + 'items');
      const changes: RawBuilder<unknown>[] = [];
      // Retention purge reads creation time, which never changes: created_at ≤ terminal_at.
      if (!indexes.has('ix_created')) changes.push(sql`ADD INDEX ix_created (queue, created_at)`);
      if (indexes.has('ix_terminal')) changes.push(sql`DROP INDEX ix_terminal`);
      if (changes.length > 0) await sql`ALTER TABLE ${t.items} ${sql.join(changes)}`.execute(conn);
    },
  },
  {
    version: 3,
    name: 'dependency waits in their own table',
    // Only blocked items need finding by dependency key or probe time, yet
    // every enqueued item paid for an entry in both indexes (NULLs are
    // indexed too), which slowed every bulk enqueue (docs/BENCHMARKS.md). A waits
    // row exists while its item is blocked: every change into or out
    // of `blocked` writes both in one transaction. The item keeps its
    // dependency columns for reading.
    statements: (t) => [
      sql`CREATE TABLE IF NOT EXISTS ${t.waits} (
        item_id VARCHAR(32) ${ASCII} NOT NULL,
        queue VARCHAR(64) ${ASCII} NOT NULL,
        dependency_key VARCHAR(255) ${TEXT} NOT NULL,
        probe_after DATETIME(6) NOT NULL,
        PRIMARY KEY (item_id) /*T![clustered_index] NONCLUSTERED */,
        KEY ix_dependency (dependency_key),
        KEY ix_probe (probe_after)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin /*T! SHARD_ROW_ID_BITS=4 */`,
      sql`INSERT IGNORE INTO ${t.waits} (item_id, queue, dependency_key, probe_after)
        SELECT id, queue, dependency_key, probe_after FROM ${t.items}
        WHERE state = 'blocked' AND dependency_key IS NOT NULL AND probe_after IS NOT NULL`,
    ],
    run: async (conn, t, prefix) => {
      const indexes = await indexNames(conn, prefix + 'items');
      const drops = ['ix_dependency', 'ix_probe']
        .filter((name) => indexes.has(name))
        .map((name) => sql`DROP INDEX ${sql.raw(name)}`);
      if (drops.length > 0) await sql`ALTER TABLE ${t.items} ${sql.join(drops)}`.execute(conn);
    },
  },
  {
    version: 4,
    name: 'dependency wake marks',
    // A handler that reads an awaited fact as absent, then blocks on it, races
    // the producer that commits the fact and wakes the key in between: the
    // wake found nothing blocked, and the block waited to its expiry. The
    // ledger now remembers when each key was last woken; both a wake and a
    // block lock the key's row first, so they serialise, and a block on a key
    // woken after its attempt began goes back to pending instead.
    statements: (t) => [
      sql`CREATE TABLE IF NOT EXISTS ${t.wakeMarks} (
        dependency_key VARCHAR(255) ${TEXT} NOT NULL,
        woken_at DATETIME(6) NOT NULL,
        touched_at DATETIME(6) NOT NULL,
        PRIMARY KEY (dependency_key) /*T![clustered_index] NONCLUSTERED */,
        KEY ix_touched (touched_at)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
  },
  {
    version: 5,
    name: 'lane rows written only when a lane goes idle or busy',
    // `active` counted a lane's unfinished items, so every enqueue and every
    // end of a head wrote the lane row, and on TiDB a busy lane's
    // completions queued behind its enqueues on that one row. `busy_from`
    // changes only between idle and busy: 0 while the lane has no unfinished
    // item, else the sequence of the item that made it busy (that item is
    // the head an enqueue creates). A head's end writes the row only when it
    // was the lane's last item. `active` is dropped, not left stale: a worker
    // of an older build fails on its first lane write instead of keeping a
    // count nobody reads (stop older workers before this step).
    statements: () => [],
    run: async (conn, t, prefix) => {
      const columns = await columnNames(conn, prefix + 'lanes');
      if (!columns.has('busy_from'))
        await sql`ALTER TABLE ${t.lanes} ADD COLUMN busy_from BIGINT NOT NULL DEFAULT 0`.execute(conn);
      if (columns.has('active')) {
        // Any sequence of the lane will do for a busy lane: only new sequences, all above next_seq, are compared with
        // it.
        await sql`UPDATE ${t.lanes} SET busy_from = IF(active > 0, GREATEST(next_seq, 1), 0)`.execute(conn);
        await sql`ALTER TABLE ${t.lanes} DROP COLUMN active`.execute(conn);
      }
    },
  },
  {
    version: 6,
    name: 'fleet tasks',
    // The depth gauges counted every item with a GROUP BY over the whole
    // table, on every replica at every pass. They are now counted from
    // bounded index ranges by whichever replica takes the task's lease, and
    // the others read what it found: one row.
    statements: (t) => [
      sql`CREATE TABLE IF NOT EXISTS ${t.fleetTasks} (
        name VARCHAR(64) ${ASCII} NOT NULL,
        holder VARCHAR(128) ${TEXT} NOT NULL,
        lease_until DATETIME(6) NOT NULL,
        done_at DATETIME(6) NOT NULL,
        result LONGTEXT ${TEXT} NULL,
        PRIMARY KEY (name) /*T![clustered_index] CLUSTERED */
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
  },
  {
    version: 7,
    name: 'durable steps, progress and coalesced groups',
    // ctx.step records each finished step of an item as a row keyed by the
    // item and the step's name, so a later attempt finds it done; ctx.progress
    // keeps its latest report on the item itself. Purge deletes an item's steps
    // with it. A coalesced item names the head of the group it was claimed in.
    statements: (t) => [
      sql`CREATE TABLE IF NOT EXISTS ${t.steps} (
        item_id VARCHAR(32) ${ASCII} NOT NULL,
        name VARCHAR(255) ${TEXT} NOT NULL,
        attempt INT NOT NULL,
        result LONGTEXT ${TEXT} NULL,
        done_at DATETIME(6) NOT NULL,
        PRIMARY KEY (item_id, name) /*T![clustered_index] CLUSTERED */
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
    run: async (conn, t, prefix) => {
      const columns = await columnNames(conn, prefix + 'items');
      const add: RawBuilder<unknown>[] = [];
      if (!columns.has('progress')) add.push(sql`ADD COLUMN progress TEXT ${TEXT} NULL`);
      if (!columns.has('group_head')) add.push(sql`ADD COLUMN group_head VARCHAR(32) ${ASCII} NULL`);
      // One ALTER each: TiDB takes one column change per statement.
      for (const change of add) await sql`ALTER TABLE ${t.items} ${change}`.execute(conn);
    },
  },
  {
    version: 8,
    name: 'queues, live consumers and rate limits',
    // One row per queue that a claim has capped: every capped claim of the
    // queue writes it first, so capped claims take turns and each counts the
    // processing items after the one before it committed (sql/fleet/fleet-cap.ts).
    // One row per running consumer, written every few seconds: what the
    // fleet serves, for explain ("why isn't this item running?") and stats.
    // One row per rate-limited key: when its next start may be, and up to
    // when refused items have reserved their turns (sql/rates/rate-limits.ts).
    statements: (t) => [
      sql`CREATE TABLE IF NOT EXISTS ${t.rateLimits} (
        queue VARCHAR(64) ${ASCII} NOT NULL,
        rate_key VARCHAR(255) ${TEXT} NOT NULL,
        next_at DATETIME(6) NOT NULL,
        reserved_until DATETIME(6) NOT NULL,
        PRIMARY KEY (queue, rate_key) /*T![clustered_index] CLUSTERED */
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      sql`CREATE TABLE IF NOT EXISTS ${t.consumers} (
        name VARCHAR(128) ${TEXT} NOT NULL,
        queue VARCHAR(64) ${ASCII} NOT NULL,
        classes VARCHAR(64) ${ASCII} NOT NULL,
        types TEXT ${TEXT} NULL,
        concurrency INT NOT NULL,
        max_processing INT NULL,
        epoch BIGINT NULL,
        version VARCHAR(64) ${TEXT} NOT NULL,
        started_at DATETIME(6) NOT NULL,
        last_seen DATETIME(6) NOT NULL,
        PRIMARY KEY (name) /*T![clustered_index] CLUSTERED */,
        KEY ix_queue (queue, last_seen)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      sql`CREATE TABLE IF NOT EXISTS ${t.queues} (
        queue VARCHAR(64) ${ASCII} NOT NULL,
        capped_claims BIGINT NOT NULL DEFAULT 0,
        updated_at DATETIME(6) NOT NULL,
        PRIMARY KEY (queue) /*T![clustered_index] CLUSTERED */
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
  },
  {
    version: 9,
    name: 'concurrency keys, fair and paused queues',
    // An item may carry a concurrency key; its queue's key_limit says how
    // many items of one key may be admitted at once (sql/keys/admission.ts).
    // A key's row counts its admitted items; an item waiting for a slot has
    // a row in key_waits, in the order slots go to them: earliest due first,
    // then in the order of their enqueue (seq: the place in its batch). In a
    // fair queue (queues.fair) a key's row also deals its items' rounds. A
    // paused queue (queues.paused) claims nothing (sql/queues/queue-settings.ts). Items without a key
    // add nothing to either, and no index: the item's key is a plain column.
    statements: (t) => [
      sql`CREATE TABLE IF NOT EXISTS ${t.keys} (
        queue VARCHAR(64) ${ASCII} NOT NULL,
        ckey VARCHAR(255) ${TEXT} NOT NULL,
        admitted BIGINT NOT NULL,
        granted BIGINT NOT NULL,
        next_round BIGINT NOT NULL DEFAULT 0,
        round_from BIGINT NOT NULL DEFAULT 0,
        fair TINYINT NOT NULL DEFAULT 0,
        PRIMARY KEY (queue, ckey) /*T![clustered_index] CLUSTERED */
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      sql`CREATE TABLE IF NOT EXISTS ${t.keyWaits} (
        queue VARCHAR(64) ${ASCII} NOT NULL,
        ckey VARCHAR(255) ${TEXT} NOT NULL,
        run_after DATETIME(6) NOT NULL,
        seq INT NOT NULL,
        id VARCHAR(32) ${ASCII} NOT NULL,
        PRIMARY KEY (queue, ckey, run_after, seq, id) /*T![clustered_index] CLUSTERED */
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
    run: async (conn, t, prefix) => {
      const items = await columnNames(conn, prefix + 'items');
      if (!items.has('concurrency_key'))
        await sql`ALTER TABLE ${t.items} ADD COLUMN concurrency_key VARCHAR(255) ${TEXT} NULL`.execute(conn);
      const queues = await columnNames(conn, prefix + 'queues');
      if (!queues.has('key_limit')) await sql`ALTER TABLE ${t.queues} ADD COLUMN key_limit INT NULL`.execute(conn);
      if (!queues.has('fair'))
        await sql`ALTER TABLE ${t.queues} ADD COLUMN fair TINYINT NOT NULL DEFAULT 0`.execute(conn);
      if (!queues.has('paused'))
        await sql`ALTER TABLE ${t.queues} ADD COLUMN paused TINYINT NOT NULL DEFAULT 0`.execute(conn);
    },
  },
  {
    version: 10,
    name: 'trace context',
    // An item's creation context as a W3C traceparent (src/tracing/), written
    // at insert when OpenTelemetry is loaded and never changed. A producer
    // names the column only for an item that has one, so it still enqueues
    // on schema 9 without OpenTelemetry.
    statements: () => [],
    run: async (conn, t, prefix) => {
      const items = await columnNames(conn, prefix + 'items');
      if (!items.has('traceparent'))
        await sql`ALTER TABLE ${t.items} ADD COLUMN traceparent VARCHAR(55) ${ASCII} NULL`.execute(conn);
    },
  },
  {
    version: 11,
    name: 'concurrency limits per type',
    // A type's own limit per concurrency key (sql/keys/scope.ts): its items'
    // keys are admitted and counted apart from the queue's, in key rows named
    // `type␟key`. An item keeps the name of the row that admitted it as its
    // concurrency_key, so this table is read only at enqueue and by the
    // hand-ons of those rows.
    statements: (t) => [
      sql`CREATE TABLE IF NOT EXISTS ${t.typeLimits} (
        queue VARCHAR(64) ${ASCII} NOT NULL,
        type VARCHAR(128) ${ASCII} NOT NULL,
        key_limit INT NOT NULL,
        updated_at DATETIME(6) NOT NULL,
        PRIMARY KEY (queue, type) /*T![clustered_index] CLUSTERED */
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
  },
  {
    version: 12,
    name: 'recurring schedules',
    // Recurring schedules live in the ledger (before, only as BullMQ job
    // schedulers in Redis, lost with it): the definition, where it was
    // declared, the next fire time and the last. A fire advances next_fire_at
    // by a CAS on `revision` in the transaction that enqueues its item
    // (sql/schedules/fires.ts); ix_due finds the due ones and the earliest.
    statements: (t) => [
      sql`CREATE TABLE IF NOT EXISTS ${t.schedules} (
        name VARCHAR(100) ${ASCII} NOT NULL,
        source VARCHAR(8) ${ASCII} NOT NULL,
        pattern VARCHAR(200) ${TEXT} NULL,
        tz VARCHAR(64) ${ASCII} NULL,
        every_ms BIGINT NULL,
        queue VARCHAR(64) ${ASCII} NOT NULL,
        item LONGTEXT ${TEXT} NOT NULL,
        backfill_ms BIGINT NOT NULL DEFAULT 0,
        paused TINYINT NOT NULL DEFAULT 0,
        next_fire_at DATETIME(6) NOT NULL,
        last_fire_at DATETIME(6) NULL,
        fires BIGINT NOT NULL DEFAULT 0,
        revision BIGINT NOT NULL,
        created_at DATETIME(6) NOT NULL,
        updated_at DATETIME(6) NOT NULL,
        PRIMARY KEY (name) /*T![clustered_index] CLUSTERED */,
        KEY ix_due (paused, next_fire_at)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
    ],
  },
  {
    version: 13,
    name: 'request digests of idempotency keys',
    // The digest of the request an idempotency key was first enqueued with
    // (request-digest.ts): the same key with a different request is refused
    // (IdempotencyConflictError). Items enqueued before have NULL, and a key
    // of theirs answers `duplicate: true` as before. Sixteen bytes, fixed,
    // at the end of the row: MariaDB adds it instantly, TiDB without a
    // backfill; only keyed items carry it.
    statements: () => [],
    run: async (conn, t, prefix) => {
      const items = await columnNames(conn, prefix + 'items');
      if (!items.has('request_digest'))
        await sql`ALTER TABLE ${t.items} ADD COLUMN request_digest BINARY(16) NULL`.execute(conn);
    },
  },
  {
    version: 14,
    name: 'stale-only queues',
    // A queue an operator set to claim only rescued work (Ledger.setStaleOnly,
    // docs/design/consumer.md, "Stale-only claims"): its consumers claim only items
    // whose lease expired, and no new pending work, until it is set back.
    statements: () => [],
    run: async (conn, t, prefix) => {
      const queues = await columnNames(conn, prefix + 'queues');
      if (!queues.has('stale_only'))
        await sql`ALTER TABLE ${t.queues} ADD COLUMN stale_only TINYINT NOT NULL DEFAULT 0`.execute(conn);
    },
  },
  {
    version: 15,
    name: 'stage timings in the attempt history, stale-only consumers',
    // The stages an attempt timed (ctx.stage) as JSON, on its history row
    // (sql/complete/stage-history.ts). Only a run that timed stages names the column;
    // a first-try success that did gets a history row for them. And why a
    // live consumer claims only rescued work, as of its last heartbeat
    // (`pool`, `slow`, …; NULL: it claims as usual), for explain. Nullable,
    // at the end of the row: MariaDB adds them instantly, TiDB without a backfill.
    statements: () => [],
    run: async (conn, t, prefix) => {
      const attempts = await columnNames(conn, prefix + 'attempts');
      if (!attempts.has('stages'))
        await sql`ALTER TABLE ${t.attempts} ADD COLUMN stages TEXT ${TEXT} NULL`.execute(conn);
      const consumers = await columnNames(conn, prefix + 'consumers');
      if (!consumers.has('stale_only'))
        await sql`ALTER TABLE ${t.consumers} ADD COLUMN stale_only VARCHAR(16) ${ASCII} NULL`.execute(conn);
    },
  },
  DRAIN_ONLY_MIGRATION,
  WORKFLOWS_MIGRATION,
  QUEUE_SETTINGS_MIGRATION,
];

async function columnNames(conn: LedgerDb, table: string): Promise<Set<string>> {
  const r = await sql<{ name: string }>`SELECT column_name AS name FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = ${table}`.execute(conn);
  return new Set(r.rows.map((x) => String(x.name).toLowerCase()));
}

async function indexNames(conn: LedgerDb, table: string): Promise<Set<string>> {
  const r = await sql<{ name: string }>`SELECT DISTINCT index_name AS name FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = ${table}`.execute(conn);
  return new Set(r.rows.map((x) => x.name));
}
