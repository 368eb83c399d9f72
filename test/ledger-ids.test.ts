import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { newTimeId } from '../src/ledger/ids.js';
import { freshQueue } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { testScope } from './support/scope.js';

const ID = /^[A-Za-z0-9_-]{22}$/;

describe('time-ordered ids', () => {
  test('sort as their creation times do, in the API id alphabet', () => {
    const start = Date.UTC(2026, 0, 1);
    const ids = [0, 1, 2, 63, 64, 4_095, 4_096, 86_400_000, 10 * 365 * 86_400_000].map((d) => newTimeId(start + d));
    for (const id of ids) expect(id).toMatch(ID);
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(Array.from({ length: 1000 }, () => newTimeId(start))).size).toBe(1000);
  });
});

describe('item ids on the server', () => {
  const scope = testScope();

  // InnoDB gets ids in creation order, so every insert lands at its indexes' right edge; TiDB gets
  // random ids, which keep its inserts spread over regions.
  test('follow creation order on InnoDB and not on TiDB, laned or not', async () => {
    const { ledger } = await scope.ledger();
    const queue = freshQueue('ids');
    const made: string[] = [];
    for (let i = 0; i < 24; i++) {
      const [r] = await ledger.enqueueMany([
        { queue, type: 't', payload: {}, ...(i % 2 === 1 ? { lane: `l${i % 3}` } : {}) },
      ]);
      made.push(r!.id);
      // The next item is created in a later millisecond than this one's id (made before this returned):
      // ids of one millisecond are ordered by chance.
      const returnedAt = Date.now();
      await waitFor(() => Date.now() > returnedAt, 1000, 'the clock to move on');
    }
    for (const id of made) expect(id).toMatch(ID);
    const rows = await sql<{ id: string }>`SELECT id FROM lw_items WHERE queue = ${queue} ORDER BY id`.execute(
      ledger.db,
    );
    const inIdOrder = rows.rows.map((r) => r.id);
    expect(new Set(inIdOrder)).toEqual(new Set(made));
    const family = (await ledger.capabilities()).family;
    if (family === 'tidb') expect(inIdOrder).not.toEqual(made);
    else expect(inIdOrder).toEqual(made);
  });
});
