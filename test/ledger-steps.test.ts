import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { LeaseLostError, ValidationError } from '../src/errors.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { freshQueue, claimOne, mustGet, withForeignToken } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';

// Durable steps and progress at the ledger (docs/design/batches-and-steps.md, "Durable
// steps" and "Progress"): every write is fenced by the holder's lease token.

let tl: TestLedger;
let ledger: Ledger;

beforeAll(async () => {
  tl = await createTestLedger();
  ledger = tl.ledger;
  await sql`CREATE TABLE step_writes (id INT AUTO_INCREMENT PRIMARY
    KEY, item_id VARCHAR(32) NOT NULL, note VARCHAR(64) NOT NULL)`.execute(ledger.db);
});
afterAll(async () => {
  await tl?.drop();
});

async function stepWrites(itemId: string): Promise<string[]> {
  const r = await sql<{ note: string }>`SELECT note FROM step_writes WHERE item_id = ${itemId} ORDER BY id`.execute(
    ledger.db,
  );
  return r.rows.map((x) => x.note);
}

describe('durable steps', () => {
  test(
    'a recorded step outlives its lease: a stale holder cannot ' +
      'record one, the next holder sees it and records its own',
    async () => {
      const queue = freshQueue('steps');
      const { id } = await ledger.enqueue({ queue, type: 't', payload: {} });
      const first = await claimOne(ledger, queue, 'first', 300);
      await ledger.recordStep(first, 'fetch', { rows: 3 });
      expect(await ledger.steps(id)).toMatchObject([{ name: 'fetch', attempt: 1, result: { rows: 3 } }]);

      // The lease runs out and the item is reclaimed and claimed again.
      await waitFor(
        async () => (await ledger.reclaimExpired({ queue })).reclaimed.length > 0 || undefined,
        10_000,
        'reclaim',
      );
      const second = await claimOne(ledger, queue, 'second');
      expect(second.attempt).toBe(2);

      await expect(ledger.recordStep(first, 'transform', 1)).rejects.toBeInstanceOf(LeaseLostError);
      await expect(ledger.recordStep(withForeignToken(second), 'transform', 1)).rejects.toBeInstanceOf(LeaseLostError);
      await ledger.recordStep(second, 'transform', undefined);
      const steps = await ledger.steps(id);
      expect(steps.map((s) => [s.name, s.attempt, s.result])).toEqual([
        ['fetch', 1, { rows: 3 }],
        ['transform', 2, undefined],
      ]);
      expect(steps[0]!.doneAt).toBeInstanceOf(Date);
    },
  );

  test('a transaction step commits its writes with its record, and a stale holder commits neither', async () => {
    const queue = freshQueue('steps-tx');
    const { id } = await ledger.enqueue({ queue, type: 't', payload: {} });
    const held = await claimOne(ledger, queue);
    const value = await ledger.recordStepWithin(held, 'write', async (trx) => {
      await sql`INSERT INTO step_writes (item_id, note) VALUES (${id}, 'kept')`.execute(trx);
      return 'written';
    });
    expect(value).toBe('written');

    const stale = withForeignToken(held);
    await expect(
      ledger.recordStepWithin(stale, 'write-again', async (trx) => {
        await sql`INSERT INTO step_writes (item_id, note) VALUES (${id}, 'rolled back')`.execute(trx);
        return 'never';
      }),
    ).rejects.toBeInstanceOf(LeaseLostError);
    // A throwing body records nothing and writes nothing.
    await expect(
      ledger.recordStepWithin(held, 'throws', async (trx) => {
        await sql`INSERT INTO step_writes (item_id, note) VALUES (${id}, 'thrown away')`.execute(trx);
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');

    expect(await stepWrites(id)).toEqual(['kept']);
    expect((await ledger.steps(id)).map((s) => [s.name, s.result])).toEqual([['write', 'written']]);
  });

  test('bad input names its field and writes nothing', async () => {
    const queue = freshQueue('steps-bad');
    const { id } = await ledger.enqueue({ queue, type: 't', payload: {} });
    const held = await claimOne(ledger, queue);
    const refused = async (p: Promise<unknown>, field: string): Promise<void> => {
      const error = await p.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).fields).toEqual([field]);
    };
    await refused(ledger.recordStep(held, '', 1), 'name');
    await refused(ledger.recordStep(held, 'x'.repeat(256), 1), 'name');
    await refused(ledger.recordStep(held, 'ends in a space ', 1), 'name');
    await refused(ledger.recordStep(held, 'big', 'x'.repeat(ledger.config.resultMaxBytes + 1)), 'step result');
    await refused(
      ledger.recordStep(held, 'fn', () => 1),
      'step result',
    );
    await refused(ledger.saveProgress([{ handle: held, progress: 101 }]), 'progress');
    await refused(ledger.saveProgress([{ handle: held, progress: 'half' }]), 'progress');
    await refused(ledger.saveProgress([{ handle: held, progress: { note: 'x'.repeat(5000) } }]), 'progress');
    await refused(ledger.steps('not an id!'), 'id');
    expect(await ledger.steps(id)).toEqual([]);
    expect((await mustGet(ledger, id)).progress).toBeNull();
  });
});

describe('progress', () => {
  test('each report is fenced by its token, many in one statement; the terminal item keeps the last', async () => {
    const queue = freshQueue('progress');
    await ledger.enqueueMany([0, 1, 2].map((n) => ({ queue, type: 't', payload: { n } })));
    const [a, b, c] = (await ledger.claim({ queue, owner: 'w', limit: 3, leaseMs: 60_000 })).items;
    if (!a || !b || !c) throw new Error('three items expected');
    await ledger.saveProgress([
      { handle: a, progress: 40 },
      { handle: withForeignToken(b), progress: 90 },
      { handle: c, progress: { done: 7, of: 10 } },
    ]);
    expect((await mustGet(ledger, a.id)).progress).toBe(40);
    expect((await mustGet(ledger, b.id)).progress).toBeNull();
    expect((await mustGet(ledger, c.id)).progress).toEqual({ done: 7, of: 10 });

    await ledger.saveProgress([{ handle: a, progress: 100 }]);
    expect(await ledger.complete(a)).toMatchObject({ won: true });
    // Ended: the item keeps its last report, and a late report of the old lease writes nothing.
    await ledger.saveProgress([{ handle: a, progress: 5 }]);
    expect(await mustGet(ledger, a.id)).toMatchObject({ state: 'completed', progress: 100 });
  });
});
