import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import { ER_DUP_ENTRY, errno } from '../retry.js';
import { OwnershipConflictError } from '../../errors.js';
import type { LedgerTables } from '../tables.js';
import type { Ownership } from '../types.js';
import { affected } from './common.js';

export async function getOwnership(db: LedgerDb, t: LedgerTables, queue: string): Promise<Ownership | undefined> {
  const rows = await sql<{ queue: string; deployment: string; epoch: number; activated_at: Date }>`
    SELECT queue, deployment, epoch, activated_at FROM ${t.ownership} WHERE queue = ${queue}`.execute(db);
  const r = rows.rows[0];
  return r ? { queue: r.queue, deployment: r.deployment, epoch: Number(r.epoch), activatedAt: r.activated_at } : undefined;
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
  const { queue, deployment, expectEpoch } = opts;
  if (expectEpoch === undefined) {
    await sql`INSERT INTO ${t.ownership} (queue, deployment, epoch, activated_at) VALUES (${queue}, ${deployment}, 1, NOW(6))
      ON DUPLICATE KEY UPDATE epoch = epoch + 1, deployment = ${deployment}, activated_at = NOW(6)`.execute(db);
  } else if (expectEpoch === 0) {
    try {
      await sql`INSERT INTO ${t.ownership} (queue, deployment, epoch, activated_at) VALUES (${queue}, ${deployment}, 1, NOW(6))`.execute(db);
    } catch (error) {
      if (errno(error) !== ER_DUP_ENTRY) throw error;
      const now = await getOwnership(db, t, queue);
      throw new OwnershipConflictError(queue, 0, now?.epoch ?? 0);
    }
  } else {
    const r = await sql`UPDATE ${t.ownership} SET epoch = epoch + 1, deployment = ${deployment}, activated_at = NOW(6)
      WHERE queue = ${queue} AND epoch = ${expectEpoch}`.execute(db);
    if (affected(r) !== 1) {
      const now = await getOwnership(db, t, queue);
      throw new OwnershipConflictError(queue, expectEpoch, now?.epoch ?? 0);
    }
  }
  const after = await getOwnership(db, t, queue);
  if (!after) throw new Error(`activate ${queue}: ownership row missing after write`);
  return after;
}
