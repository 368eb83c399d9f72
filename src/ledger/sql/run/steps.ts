import { sql, type Transaction } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import { runTransaction } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import type { EpochFence, LeaseHandle, StepRecord } from '../../types.js';
import { andEpochIsCurrent, fenceOf, refusal } from '../fleet/ownership.js';
import { affected } from '../common/fragments.js';

/**
 * A handle's part a step record is fenced by: the attempt is the holder's own (every claim adds one); the ownership
 * epoch, if it was claimed under one.
 */
export type StepHolder = Pick<LeaseHandle, 'id' | 'leaseToken' | 'attempt'> &
  EpochFence & { queue?: string | undefined };

interface StepRow {
  name: string;
  attempt: number;
  result: string | null;
  done_at: Date;
}

/** The steps an item has recorded, in the order they were done; `result` is the stored JSON text. */
export async function readSteps(
  db: Executor,
  t: LedgerTables,
  itemId: string,
): Promise<(Omit<StepRecord, 'result'> & { resultJson: string | null })[]> {
  const rows = await sql<StepRow>`SELECT name, attempt, result, done_at FROM ${t.steps}
    WHERE item_id = ${itemId} ORDER BY done_at, name`.execute(db);
  return rows.rows.map((r) => ({ name: r.name, attempt: r.attempt, doneAt: r.done_at, resultJson: r.result }));
}

/**
 * Records a finished step inside `trx`, fenced: the item row is updated
 * under the holder's token first (which locks it, so a reclaim waits for
 * this transaction, and on TiDB's optimistic mode conflicts with it), and
 * the step is written only when that CAS won, and, for a lease claimed under
 * an ownership epoch, that epoch is still the queue's. Throws LeaseLostError
 * (OwnershipLostError when the epoch moved on) otherwise.
 */
export async function recordStepInTx(
  trx: Executor,
  t: LedgerTables,
  h: StepHolder,
  name: string,
  resultJson: string | null,
): Promise<void> {
  const held = await sql`UPDATE ${t.items} SET updated_at = NOW(6)
    WHERE id = ${h.id} AND lease_token = ${h.leaseToken} AND state = 'processing'${andEpochIsCurrent(t, h)}`.execute(
    trx,
  );
  if (affected(held) !== 1) throw await refusal(trx, t, fenceOf(h), h.id);
  await sql`INSERT INTO ${t.steps} (item_id, name, attempt, result, done_at)
    VALUES (${h.id}, ${name}, ${h.attempt}, ${resultJson}, NOW(6))`.execute(trx);
}

/**
 * `body` (the step's own writes, or nothing), then the step's record, in one
 * ledger transaction that runs again after a conflict or a connection lost
 * before COMMIT. A COMMIT left unanswered is settled by a locking read of
 * the step's row: recorded by this attempt means committed.
 */
export function recordStep<T>(
  db: LedgerDb,
  t: LedgerTables,
  h: StepHolder,
  name: string,
  body: (trx: Transaction<Record<string, never>>) => Promise<{ value: T; resultJson: string | null }>,
): Promise<T> {
  return runTransaction(
    db,
    async (trx) => {
      const { value, resultJson } = await body(trx);
      await recordStepInTx(trx, t, h, name, resultJson);
      return value;
    },
    async () => {
      const r = await sql<{ attempt: number }>`SELECT attempt FROM ${t.steps}
        WHERE item_id = ${h.id} AND name = ${name} FOR UPDATE`.execute(db);
      return r.rows[0]?.attempt === h.attempt;
    },
  );
}
