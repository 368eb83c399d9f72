import { sql } from 'kysely';
import { afterEach, describe, expect, inject, test } from 'vitest';
import { SchemaBehindError } from '../src/errors.js';
import { Ledger } from '../src/ledger/ledger.js';
import type { ClaimedItem } from '../src/ledger/types.js';
import { migrate, SCHEMA_VERSION } from '../src/ledger/migrations.js';
import { MIGRATIONS } from '../src/ledger/migration-steps.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';
import { laneRow } from './support/items.js';

/** The steps an upgrade from `version` applies. */
const versionsAfter = (version: number): number[] => MIGRATIONS.map((m) => m.version).filter((v) => v > version);

const created: TestLedger[] = [];
const extra: Ledger[] = [];

async function fresh(): Promise<TestLedger> {
  const tl = await createTestLedger({}, false);
  created.push(tl);
  return tl;
}

afterEach(async () => {
  await Promise.allSettled(extra.splice(0).map((l) => l.close()));
  await Promise.allSettled(created.splice(0).map((tl) => tl.drop()));
});

async function tables(ledger: Ledger): Promise<string[]> {
  const r = await sql<{ name: string }>`SELECT table_name AS name FROM information_schema.tables
    WHERE table_schema = DATABASE()`.execute(ledger.db);
  // Sorted here: information_schema's collation orders '_' and letters differently on MariaDB and TiDB.
  return r.rows.map((x) => x.name).sort();
}

async function migrationRows(ledger: Ledger, prefix = 'lw_'): Promise<number[]> {
  const r = await sql<{
    version: number;
  }>`SELECT version FROM ${sql.table(`${prefix}migrations`)} ORDER BY version`.execute(ledger.db);
  return r.rows.map((x) => Number(x.version));
}

/** Each table's SHOW CREATE TABLE in `database` (the ledger's own by default), less the AUTO_INCREMENT counter. */
async function definitions(ledger: Ledger, database?: string): Promise<string[]> {
  const schema = database === undefined ? sql`DATABASE()` : sql`${database}`;
  const r = await sql<{ name: string }>`SELECT table_name AS name FROM information_schema.tables
    WHERE table_schema = ${schema}`.execute(ledger.db);
  const out: string[] = [];
  for (const name of r.rows.map((x) => x.name).sort()) {
    const table = sql.table(database === undefined ? name : `${database}.${name}`);
    const shown = await sql<Record<string, string>>`SHOW CREATE TABLE ${table}`.execute(ledger.db);
    out.push(String(shown.rows[0]?.['Create Table']).replace(/ AUTO_INCREMENT=\d+/, ''));
  }
  return out;
}

describe('migrations', () => {
  test("a test ledger copies the run's template, which migrate() made: the same tables, every step", async () => {
    const copied = await createTestLedger();
    created.push(copied);
    const made = await definitions(copied.ledger, inject('ledgerTemplate').database);
    expect(made.length).toBeGreaterThan(1);
    expect(await definitions(copied.ledger)).toEqual(made);
    expect(await migrationRows(copied.ledger)).toEqual(MIGRATIONS.map((m) => m.version));
  });

  test('schemaStatus and assertSchemaCurrent before and after migrate', async () => {
    const { ledger } = await fresh();
    expect(SCHEMA_VERSION).toBeGreaterThanOrEqual(1);
    expect(await ledger.schemaStatus()).toEqual({ current: 0, required: SCHEMA_VERSION, behind: true });
    const err = await ledger.assertSchemaCurrent().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SchemaBehindError);
    expect(err).toMatchObject({ current: 0, required: SCHEMA_VERSION });
    expect(await tables(ledger)).toEqual([]);

    await ledger.migrate();
    expect(await ledger.schemaStatus()).toEqual({ current: SCHEMA_VERSION, required: SCHEMA_VERSION, behind: false });
    await expect(ledger.assertSchemaCurrent()).resolves.toBeUndefined();
  });

  test('migrate twice: the second run is a no-op', async () => {
    const { ledger } = await fresh();
    const first = await ledger.migrate();
    expect(first).toEqual({ from: 0, to: SCHEMA_VERSION, applied: MIGRATIONS.map((m) => m.version) });
    const afterFirst = await tables(ledger);
    expect(afterFirst).toEqual([
      'lw_attempts',
      'lw_consumers',
      'lw_fleet_tasks',
      'lw_items',
      'lw_key_waits',
      'lw_keys',
      'lw_lanes',
      'lw_migrations',
      'lw_ownership',
      'lw_queues',
      'lw_rate_limits',
      'lw_schedules',
      'lw_steps',
      'lw_type_limits',
      'lw_waits',
      'lw_wake_marks',
      'lw_workflow_edges',
      'lw_workflow_jobs',
      'lw_workflows',
    ]);
    // Data written between runs survives the second.
    const item = await ledger.enqueue({ queue: 'mig', type: 't', payload: 1, lane: 'L' });

    const second = await ledger.migrate();
    expect(second).toEqual({ from: SCHEMA_VERSION, to: SCHEMA_VERSION, applied: [] });
    expect(await tables(ledger)).toEqual(afterFirst);
    expect(await migrationRows(ledger)).toEqual(first.applied);
    expect((await ledger.get(item.id))?.state).toBe('pending');
  });

  test('concurrent migrate() calls on a fresh database all succeed; the schema is applied once', async () => {
    const { ledger, url } = await fresh();
    const others = Array.from({ length: 3 }, () => new Ledger({ url, poolSize: 2 }));
    extra.push(...others);
    const all = [ledger, ...others];
    // Connect every pool first so the migrations really start together.
    await Promise.all(all.map((l) => sql`SELECT 1`.execute(l.db)));
    const results = await Promise.all(all.map((l) => l.migrate()));
    expect(results.map((r) => r.to)).toEqual(all.map(() => SCHEMA_VERSION));
    // One of them did the work, the others found it done.
    const applied = results.map((r) => r.applied.length).sort();
    expect(applied).toEqual([0, 0, 0, MIGRATIONS.length]);
    const other = others[0]!;
    expect(await migrationRows(ledger)).toEqual(MIGRATIONS.map((m) => m.version));
    expect(await other.schemaStatus()).toMatchObject({ behind: false });
    // And the schema works.
    const r = await other.enqueue({ queue: 'mig', type: 't', payload: 1 });
    expect((await ledger.get(r.id))?.id).toBe(r.id);
  });

  test('schema 1 → 2: items written under schema 1 read back the same, and the new column forms hold', async () => {
    const { ledger } = await fresh();
    await migrate(ledger.db, 'lw_', 60, 1);
    const t = ledger.tables;
    // Rows as schema 1 stored them: NULL for "no lease", "not started", "not ended".
    const cols = sql`(id, queue, type, is_head, queue_class, priority, payload, state, run_after, attempt, max_attempts,
      lease_owner, lease_token, lease_until, created_at, started_at, terminal_at, updated_at)`;
    await sql`INSERT INTO ${t.items} ${cols} VALUES
      ('waiting', 'mig', 't', 1, 'default', 0, '1', 'pending', NOW(6), 0, 3, NULL, NULL, NULL, NOW(6), NULL, NULL,
      NOW(6)),
      ('held', 'mig', 't', 1, 'default', 0, '2', 'processing', NOW(6), 1, 3, ${'wörker-' + 'x'.repeat(100)},
      'tok_0123456789abcdef',
        NOW(6) + INTERVAL 1 HOUR, NOW(6), NOW(6), NULL, NOW(6)),
      ('ended', 'mig', 't', 1, 'default', 0, '3', 'completed', NOW(6), 1, 3, 'w1', 'tok_fedcba9876543210',
        NULL, NOW(6) - INTERVAL 2 HOUR, NOW(6) - INTERVAL 2 HOUR, NOW(6) - INTERVAL 90 MINUTE, NOW(6))`.execute(
      ledger.db,
    );

    const up = await ledger.migrate();
    expect(up).toEqual({ from: 1, to: SCHEMA_VERSION, applied: versionsAfter(1) });
    const waiting = await ledger.get('waiting');
    expect(waiting).toMatchObject({
      state: 'pending',
      leaseOwner: null,
      leaseToken: null,
      leaseUntil: null,
      startedAt: null,
      terminalAt: null,
    });
    const held = await ledger.get('held');
    expect(held).toMatchObject({ state: 'processing', leaseToken: 'tok_0123456789abcdef', terminalAt: null });
    expect(held?.leaseOwner).toBe(('w?rker-' + 'x'.repeat(100)).slice(0, 64));
    expect(held?.leaseUntil?.getTime()).toBeGreaterThan(Date.now());
    const ended = await ledger.get('ended');
    expect(ended).toMatchObject({ state: 'completed', leaseUntil: null, leaseOwner: 'w1' });
    expect(ended?.terminalAt?.getTime()).toBeLessThan(Date.now() - 3_000_000);

    // New leases store the owner the same way: printable ASCII, at most 64 characters.
    const [claimed] = (
      await ledger.claim({ queue: 'mig', owner: 'ünïcode-' + 'y'.repeat(80), leaseMs: 60_000, limit: 1 })
    ).items;
    expect(claimed?.id).toBe('waiting');
    expect((await ledger.get('waiting'))?.leaseOwner).toBe(('?n?code-' + 'y'.repeat(80)).slice(0, 64));

    // The held item's lease still fences: its token completes it, and purge goes by creation time.
    expect(await ledger.complete(held as ClaimedItem)).toMatchObject({ won: true });
    expect(await ledger.purge({ olderThanMs: 3_600_000, queue: 'mig' })).toBe(1);
    expect(await ledger.get('ended')).toBeUndefined();

    const indexes = await sql<{ name: string }>`SELECT DISTINCT index_name AS name FROM information_schema.statistics
      WHERE table_schema = DATABASE() AND table_name = 'lw_items'`.execute(ledger.db);
    const names = indexes.rows.map((r) => r.name);
    expect(names).toContain('ix_created');
    expect(names).not.toContain('ix_terminal');
    expect(await ledger.migrate()).toEqual({ from: SCHEMA_VERSION, to: SCHEMA_VERSION, applied: [] });
  });

  test('schema 2 → 3: blocked items keep their waits; the dependency and probe indexes of items go', async () => {
    const { ledger } = await fresh();
    await migrate(ledger.db, 'lw_', 60, 2);
    const t = ledger.tables;
    const cols = sql`(id, queue, type, is_head, queue_class, priority, payload, state, run_after, attempt, max_attempts,
      dependency_key, probe_after, blocked_at, block_expires_at, created_at, updated_at)`;
    await sql`INSERT INTO ${t.items} ${cols} VALUES
      ('on-key', 'mig', 't', 1, 'default', 0, '1', 'blocked', NOW(6), 0, 3, 'repo:1', NOW(6) + INTERVAL 1 HOUR,
        NOW(6), NOW(6) + INTERVAL 1 HOUR, NOW(6), NOW(6)),
      ('due', 'mig', 't', 1, 'default', 0, '2', 'blocked', NOW(6), 0, 3, 'repo:2', NOW(6) - INTERVAL 1 SECOND,
        NOW(6), NOW(6) + INTERVAL 1 HOUR, NOW(6), NOW(6)),
      ('free', 'mig', 't', 1, 'default', 0, '3', 'pending', NOW(6), 0, 3, NULL, NULL, NULL, NULL, NOW(6),
      NOW(6))`.execute(ledger.db);

    expect(await ledger.migrate()).toEqual({ from: 2, to: SCHEMA_VERSION, applied: versionsAfter(2) });
    const waits = await sql<{
      item_id: string;
      dependency_key: string;
    }>`SELECT item_id, dependency_key FROM ${t.waits}
      ORDER BY item_id`.execute(ledger.db);
    expect(waits.rows).toEqual([
      { item_id: 'due', dependency_key: 'repo:2' },
      { item_id: 'on-key', dependency_key: 'repo:1' },
    ]);
    // Both ways of finding a wait work on the migrated rows.
    expect(await ledger.wakeDependency('repo:1')).toEqual([{ id: 'on-key', queue: 'mig', lane: null }]);
    expect((await ledger.probeDependencyWaits({ queue: 'mig' })).probed).toEqual([
      { id: 'due', queue: 'mig', lane: null },
    ]);
    expect((await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.waits}`.execute(ledger.db)).rows[0]?.n).toBe(0);

    const indexes = await sql<{ name: string }>`SELECT DISTINCT index_name AS name FROM information_schema.statistics
      WHERE table_schema = DATABASE() AND table_name = 'lw_items'`.execute(ledger.db);
    // Sorted here: the servers' collations of information_schema order PRIMARY differently.
    expect(indexes.rows.map((r) => r.name).sort((a, b) => a.toLowerCase().localeCompare(b.toLowerCase()))).toEqual([
      'ix_claim',
      'ix_created',
      'ix_lane',
      'PRIMARY',
      'ux_idempotency',
    ]);
    expect(await ledger.migrate()).toEqual({ from: SCHEMA_VERSION, to: SCHEMA_VERSION, applied: [] });
  });

  test(
    'schema 4 → 5: a busy lane stays busy (its waiting item runs ' +
      'after its head), an idle lane takes its next item as head',
    async () => {
      const { ledger } = await fresh();
      await migrate(ledger.db, 'lw_', 60, 4);
      const t = ledger.tables;
      // Lane "busy": its head is held, one item waits behind it (active = 2). Lane "idle": both
      // items ended (active = 0).
      const cols = sql`(id, queue, type, lane, lane_seq, is_head, queue_class, priority, payload, state, run_after,
        attempt, max_attempts,
      lease_owner, lease_token, lease_until, created_at, started_at, terminal_at, updated_at)`;
      await sql`INSERT INTO ${t.items} ${cols} VALUES
      ('b1', 'mig', 't', 'busy', 1, 1, 'default', 0, '1', 'processing', NOW(6), 1, 3, 'w', 'tok_b1',
      NOW(6) + INTERVAL 1 HOUR,
        NOW(6), NOW(6), '1000-01-01', NOW(6)),
      ('b2', 'mig', 't', 'busy', 2, 0, 'default', 0, '2', 'pending', NOW(6), 0, 3, '', '', '1000-01-01', NOW(6),
      '1000-01-01', '1000-01-01', NOW(6)),
      ('i1', 'mig', 't', 'idle', 1, 1, 'default', 0, '3', 'completed', NOW(6), 1, 3, 'w', 'tok_i1', '1000-01-01',
      NOW(6), NOW(6), NOW(6), NOW(6)),
      ('i2', 'mig', 't', 'idle', 2, 1, 'default', 0, '4', 'completed', NOW(6), 1, 3, 'w', 'tok_i2', '1000-01-01',
      NOW(6), NOW(6), NOW(6), NOW(6))`.execute(ledger.db);
      await sql`INSERT INTO ${t.lanes} (queue, lane, next_seq, active)
        VALUES ('mig', 'busy', 2, 2), ('mig', 'idle', 2, 0)`.execute(ledger.db);

      expect(await ledger.migrate()).toEqual({ from: 4, to: SCHEMA_VERSION, applied: versionsAfter(4) });
      expect(await laneRow(ledger, 'mig', 'busy')).toEqual({ nextSeq: 2, busy: true });
      expect(await laneRow(ledger, 'mig', 'idle')).toEqual({ nextSeq: 2, busy: false });
      const columns = await sql<{ name: string }>`SELECT column_name AS name FROM information_schema.columns
      WHERE table_schema = DATABASE() AND table_name = 'lw_lanes'`.execute(ledger.db);
      expect(columns.rows.map((r) => String(r.name).toLowerCase()).sort()).toEqual([
        'busy_from',
        'lane',
        'next_seq',
        'queue',
      ]);

      // The busy lane: a new item waits behind the two; the held head's completion hands on to b2.
      const busyNext = await ledger.enqueue({ queue: 'mig', type: 't', payload: 5, lane: 'busy' });
      expect(await ledger.get(busyNext.id)).toMatchObject({ laneSeq: 3, isHead: false });
      const held = (await ledger.get('b1')) as ClaimedItem;
      expect(await ledger.complete(held)).toMatchObject({ won: true });
      expect(await ledger.get('b2')).toMatchObject({ state: 'pending', isHead: true });
      // The idle lane: a new item is its head at once.
      const idleNext = await ledger.enqueue({ queue: 'mig', type: 't', payload: 6, lane: 'idle' });
      expect(await ledger.get(idleNext.id)).toMatchObject({ laneSeq: 3, isHead: true });
      expect(await ledger.migrate()).toEqual({ from: SCHEMA_VERSION, to: SCHEMA_VERSION, applied: [] });
    },
  );

  test('schema 6 → 7: an item held across the upgrade gets progress and steps; purge takes its steps too', async () => {
    const { ledger } = await fresh();
    await migrate(ledger.db, 'lw_', 60, 6);
    const item = await ledger.enqueue({ queue: 'mig', type: 't', payload: 1 });
    // Held as a schema-6 worker holds it.
    await sql`UPDATE ${ledger.tables.items}
      SET state = 'processing', attempt = 1, lease_owner = 'w', lease_token = 'tok_held',
      lease_until = NOW(6) + INTERVAL 1 HOUR, started_at = NOW(6) WHERE id = ${item.id}`.execute(ledger.db);

    expect(await ledger.migrate()).toEqual({ from: 6, to: SCHEMA_VERSION, applied: versionsAfter(6) });
    const held = (await ledger.get(item.id)) as ClaimedItem;
    expect(held).toMatchObject({ state: 'processing', leaseToken: 'tok_held', progress: null });
    await ledger.saveProgress([{ handle: held, progress: 50 }]);
    await ledger.recordStep(held, 'first', { ok: true });
    expect(await ledger.complete(held)).toMatchObject({ won: true });
    expect(await ledger.inspect(item.id)).toMatchObject({
      item: { progress: 50 },
      steps: [{ name: 'first', attempt: 1, result: { ok: true } }],
    });

    await sql`UPDATE ${ledger.tables.items}
      SET created_at = NOW(6) - INTERVAL 2 HOUR, terminal_at = NOW(6) - INTERVAL 2 HOUR`.execute(ledger.db);
    expect(await ledger.purge({ olderThanMs: 3_600_000, queue: 'mig' })).toBe(1);
    const left = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${ledger.tables.steps}`.execute(ledger.db);
    expect(Number(left.rows[0]?.n)).toBe(0);
    expect(await ledger.migrate()).toEqual({ from: SCHEMA_VERSION, to: SCHEMA_VERSION, applied: [] });
  });

  test('table prefixes keep two ledgers apart in one database', async () => {
    const { ledger, url } = await fresh();
    const second = new Ledger({ url, poolSize: 2, tablePrefix: 'svc_b_' });
    extra.push(second);
    await ledger.migrate();
    expect(await second.schemaStatus()).toMatchObject({ current: 0, behind: true });
    await second.migrate();
    expect(await second.schemaStatus()).toMatchObject({ current: SCHEMA_VERSION, behind: false });
    expect(await migrationRows(second, 'svc_b_')).toEqual(MIGRATIONS.map((m) => m.version));
    const a = await ledger.enqueue({ queue: 'shared', type: 't', payload: 'a', idempotencyKey: 'k' });
    const b = await second.enqueue({ queue: 'shared', type: 't', payload: 'b', idempotencyKey: 'k' });
    expect(b.duplicate).toBe(false);
    expect(await second.get(a.id)).toBeUndefined();
    expect((await ledger.get(a.id))?.payload).toBe('a');
  });
});
