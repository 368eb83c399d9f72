import { sql } from 'kysely';
import { describe, expect, test } from 'vitest';
import { ResultNotStorableError } from '../src/errors.js';
import { consumerHarness } from './support/consumer-harness.js';
import { createEffectsTable, readEffects } from './support/effects.js';
import { mustGet } from './support/items.js';
import { waitFor } from './support/ledger.js';

// A result ctx.transaction cannot store (docs/design/handlers.md, "The handler's own writes"): nothing of the
// transaction commits, and the item ends dead with the class a handler's unstorable return value gets, after one
// attempt: a retry would return the same result and fail the same way.

const harness = consumerHarness('txresult');

describe('a result ctx.transaction cannot store', () => {
  test.each([
    ['not JSON (a BigInt)', { n: 1n }, 'invalid_result', 'result.n'],
    ['over resultMaxBytes', { blob: 'x'.repeat(1_048_577) }, 'result_too_large', 'result'],
  ])('%s: the item ends dead at its first attempt, its writes rolled back', async (_name, value, cls, field) => {
    const { tl, producer, queue } = await harness.setUp();
    await createEffectsTable(tl.ledger);
    const seen: unknown[] = [];
    await harness.consumer({
      t: async (job, ctx) =>
        ctx
          .transaction(async (trx) => {
            await sql`INSERT INTO effects (item_id, worker, started_at_us, ended_at_us)
              VALUES (${job.id}, 'w', 0, 0)`.execute(trx);
            return value;
          })
          .catch((error: unknown) => {
            seen.push(error);
            throw error;
          }),
    });
    const { id } = await producer.enqueue({ queue, type: 't', payload: {}, maxAttempts: 5 });
    await waitFor(async () => ((await mustGet(tl.ledger, id)).state === 'dead' ? true : undefined), 10_000, 'dead');
    const item = await mustGet(tl.ledger, id);
    expect(item).toMatchObject({ state: 'dead', failureClass: cls, attempt: 1, result: null });
    expect(seen).toHaveLength(1);
    expect(seen[0]).toBeInstanceOf(ResultNotStorableError);
    expect((seen[0] as ResultNotStorableError).fields).toEqual([field]);
    expect(await readEffects(tl.ledger)).toEqual([]);
  });
});
