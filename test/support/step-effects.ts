import { sql } from 'kysely';
import type { LedgerDb } from '../../src/ledger/connection.js';
import type { Ledger } from '../../src/ledger/ledger.js';
import type { Job, JobContext } from '../../src/consumer/types.js';

/**
 * The `step_effects` table: one row per run of a durable step's body, with
 * no key that would merge two runs, so a step body that ran twice shows as
 * two rows.
 */
export async function createStepEffectsTable(ledger: Ledger): Promise<void> {
  await sql`CREATE TABLE step_effects (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    item_id VARCHAR(32) NOT NULL,
    step VARCHAR(32) NOT NULL,
    worker VARCHAR(128) NOT NULL
  ) ENGINE=InnoDB`.execute(ledger.db);
}

/** The step bodies that ran for `itemId`, in order, as `step@worker`. */
export async function stepEffects(ledger: Ledger, itemId: string): Promise<string[]> {
  const r = await sql<{
    step: string;
    worker: string;
  }>`SELECT step, worker FROM step_effects WHERE item_id = ${itemId} ORDER BY id`.execute(ledger.db);
  return r.rows.map((x) => `${x.step}@${x.worker}`);
}

/**
 * A handler of three durable steps, each of which writes a row: `one`
 * outside any transaction (like a call to another system), `two` inside its
 * step's transaction, `three` outside again. With `hangAtThree` the third
 * step's body never ends (the process is killed there).
 */
export function threeStepHandler<DB>(db: LedgerDb, worker: string, opts: { hangAtThree: boolean }) {
  const write = (itemId: string, step: string) =>
    sql`INSERT INTO step_effects (item_id, step, worker) VALUES (${itemId}, ${step}, ${worker})`;
  return async (job: Job, ctx: JobContext<DB>): Promise<number> => {
    const one = await ctx.step('one', async () => {
      await write(job.id, 'one').execute(db);
      return 1;
    });
    const two = await ctx.step(
      'two',
      async (trx) => {
        await write(job.id, 'two').execute(trx);
        return one + 1;
      },
      { transaction: true },
    );
    return ctx.step('three', async () => {
      if (opts.hangAtThree) await new Promise<never>(() => undefined);
      await write(job.id, 'three').execute(db);
      return two + 1;
    });
  };
}
