import { sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { SchemaBehindError } from '../src/errors.js';
import { Ledger } from '../src/ledger/ledger.js';
import { SCHEMA_VERSION } from '../src/ledger/migrations.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';

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
    WHERE table_schema = DATABASE() ORDER BY table_name`.execute(ledger.db);
  return r.rows.map((x) => x.name);
}

async function migrationRows(ledger: Ledger, prefix = 'lw_'): Promise<number[]> {
  const r = await sql<{ version: number }>`SELECT version FROM ${sql.table(`${prefix}migrations`)} ORDER BY version`.execute(ledger.db);
  return r.rows.map((x) => Number(x.version));
}

describe('migrations', () => {
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
    expect(first).toEqual({ from: 0, to: SCHEMA_VERSION, applied: Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1) });
    const afterFirst = await tables(ledger);
    expect(afterFirst).toEqual(['lw_attempts', 'lw_items', 'lw_lanes', 'lw_migrations', 'lw_ownership']);
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
    expect(applied).toEqual([0, 0, 0, SCHEMA_VERSION]);
    const other = others[0]!;
    expect(await migrationRows(ledger)).toEqual(Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1));
    expect(await other.schemaStatus()).toMatchObject({ behind: false });
    // And the schema works.
    const r = await other.enqueue({ queue: 'mig', type: 't', payload: 1 });
    expect((await ledger.get(r.id))?.id).toBe(r.id);
  });

  test('table prefixes keep two ledgers apart in one database', async () => {
    const { ledger, url } = await fresh();
    const second = new Ledger({ url, poolSize: 2, tablePrefix: 'svc_b_' });
    extra.push(second);
    await ledger.migrate();
    expect(await second.schemaStatus()).toMatchObject({ current: 0, behind: true });
    await second.migrate();
    expect(await second.schemaStatus()).toMatchObject({ current: SCHEMA_VERSION, behind: false });
    expect(await migrationRows(second, 'svc_b_')).toEqual(Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1));
    const a = await ledger.enqueue({ queue: 'shared', type: 't', payload: 'a', idempotencyKey: 'k' });
    const b = await second.enqueue({ queue: 'shared', type: 't', payload: 'b', idempotencyKey: 'k' });
    expect(b.duplicate).toBe(false);
    expect(await second.get(a.id)).toBeUndefined();
    expect((await ledger.get(a.id))?.payload).toBe('a');
  });
});
