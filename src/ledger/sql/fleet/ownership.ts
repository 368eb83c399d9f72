import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import { ER_DUP_ENTRY, errno, runTransaction } from '../../retry.js';
import { LeaseLostError, OwnershipConflictError, OwnershipLostError } from '../../../errors.js';
import { tableText, type LedgerTables } from '../../tables.js';
import { QUEUE_CLASSES, type EpochFence, type Ownership } from '../../types.js';
import type { ValueWriter } from '../common/bound.js';
import { affected, list } from '../common/fragments.js';

/** The queue and epoch a write of a lease claimed under an ownership epoch is fenced by. */
export interface Fence {
  queue: string;
  epoch: number;
}

/** The fence of a lease: set only when it was claimed under an ownership epoch. */
export function fenceOf(h: EpochFence & { queue?: string | undefined }): Fence | undefined {
  return h.epoch === null || h.epoch === undefined || h.queue === undefined
    ? undefined
    : { queue: h.queue, epoch: h.epoch };
}

/** True while `f`'s epoch is still its queue's: a condition a fenced write adds to its own WHERE. */
export function epochIsCurrent(t: LedgerTables, f: Fence): RawBuilder<unknown> {
  return sql`EXISTS (SELECT 1 FROM ${t.ownership} WHERE queue = ${f.queue} AND epoch = ${f.epoch})`;
}

/**
 * ` AND <epoch is current>` for a lease claimed under an epoch, nothing for
 * any other: the check, and its cost, stay off queues without ownership.
 */
export function andEpochIsCurrent(
  t: LedgerTables,
  h: EpochFence & { queue?: string | undefined },
): RawBuilder<unknown> {
  const f = fenceOf(h);
  return f === undefined ? sql`` : sql` AND ${epochIsCurrent(t, f)}`;
}

/** epochIsCurrent as text, for statements written through a ValueWriter (sql/common/bound.ts). */
export function epochIsCurrentText(w: ValueWriter, t: LedgerTables, f: Fence): string {
  return `EXISTS (SELECT 1 FROM ${tableText(t, 'ownership')} WHERE queue = ${w.value(f.queue)} AND epoch = ${w.value(
    f.epoch,
  )})`;
}

/**
 * Why a fenced write of item `itemId` changed nothing: OwnershipLostError
 * when the queue's epoch is no longer the fence's, else LeaseLostError. The
 * read locks the ownership row, so inside a transaction it sees the epoch
 * now, not the transaction's snapshot.
 */
export async function refusal(
  exec: Executor,
  t: LedgerTables,
  f: Fence | undefined,
  itemId: string,
): Promise<LeaseLostError> {
  if (f === undefined) return new LeaseLostError(itemId);
  const current = await currentEpoch(exec, t, f.queue);
  return current === f.epoch ? new LeaseLostError(itemId) : new OwnershipLostError(itemId, f.queue, f.epoch, current);
}

/** The queue's epoch now (0 when it was never activated), by a locking read. */
export async function currentEpoch(exec: Executor, t: LedgerTables, queue: string): Promise<number> {
  const r = await sql<{
    epoch: number | string;
  }>`SELECT epoch FROM ${t.ownership} WHERE queue = ${queue} FOR UPDATE`.execute(exec);
  return Number(r.rows[0]?.epoch ?? 0);
}

export async function getOwnership(db: Executor, t: LedgerTables, queue: string): Promise<Ownership | undefined> {
  const rows = await sql<{ queue: string; deployment: string; epoch: number; activated_at: Date }>`
    SELECT queue, deployment, epoch, activated_at FROM ${t.ownership} WHERE queue = ${queue}`.execute(db);
  const r = rows.rows[0];
  return r
    ? { queue: r.queue, deployment: r.deployment, epoch: Number(r.epoch), activatedAt: r.activated_at }
    : undefined;
}

/**
 * Hands a queue to `deployment` under the next epoch. With `expectEpoch` the
 * change is a CAS (0 = the queue has never been activated); without it, it
 * always takes the next epoch.
 */
export async function activateOwnership(
  db: LedgerDb,
  t: LedgerTables,
  opts: { queue: string; deployment: string; expectEpoch?: number | undefined },
): Promise<Ownership> {
  const { queue } = opts;
  try {
    return await runTransaction(db, async (trx) => {
      await touchFencedInFlight(trx, t, queue);
      await takeNextEpoch(trx, t, opts);
      const after = await getOwnership(trx, t, queue);
      if (!after) throw new Error(`activate ${queue}: ownership row missing after write`);
      return after;
    });
  } catch (error) {
    // TiDB in optimistic mode checks the first activation's key at COMMIT: a racing one is refused there.
    if (opts.expectEpoch !== 0 || errno(error) !== ER_DUP_ENTRY) throw error;
    throw new OwnershipConflictError(queue, 0, await currentEpoch(db, t, queue));
  }
}

/**
 * Writes the row of every item of the queue in flight under an epoch, in the
 * activation's transaction and before its epoch changes (the order a fenced
 * completion locks them in: the item, then the ownership row it reads). A
 * fenced write of such an item that began before the activation then meets
 * it on the item's own row: it waits for it and reads the new epoch (a
 * locking read), or, on TiDB in optimistic mode, whose reads see the
 * transaction's start, its COMMIT conflicts and it runs again, and is
 * refused. Only `updated_at` changes: the holders keep their leases.
 */
async function touchFencedInFlight(trx: Executor, t: LedgerTables, queue: string): Promise<void> {
  await sql`UPDATE ${t.items} SET updated_at = NOW(6)
    WHERE queue = ${queue} AND queue_class IN (${list(
      QUEUE_CLASSES,
    )}) AND state = 'processing' AND epoch IS NOT NULL`.execute(trx);
}

async function takeNextEpoch(
  trx: Executor,
  t: LedgerTables,
  opts: { queue: string; deployment: string; expectEpoch?: number | undefined },
): Promise<void> {
  const { queue, deployment, expectEpoch } = opts;
  if (expectEpoch === undefined) {
    await sql`INSERT INTO ${t.ownership} (queue, deployment, epoch, activated_at) VALUES (${queue}, ${
      deployment
    }, 1, NOW(6))
      ON DUPLICATE KEY UPDATE epoch = epoch + 1, deployment = ${deployment}, activated_at = NOW(6)`.execute(trx);
  } else if (expectEpoch === 0) {
    try {
      await sql`INSERT INTO ${t.ownership} (queue, deployment, epoch, activated_at) VALUES (${queue}, ${
        deployment
      }, 1, NOW(6))`.execute(trx);
    } catch (error) {
      if (errno(error) !== ER_DUP_ENTRY) throw error;
      throw new OwnershipConflictError(queue, 0, await currentEpoch(trx, t, queue));
    }
  } else {
    const r = await sql`UPDATE ${t.ownership} SET epoch = epoch + 1, deployment = ${deployment}, activated_at = NOW(6)
      WHERE queue = ${queue} AND epoch = ${expectEpoch}`.execute(trx);
    if (affected(r) !== 1) throw new OwnershipConflictError(queue, expectEpoch, await currentEpoch(trx, t, queue));
  }
}
