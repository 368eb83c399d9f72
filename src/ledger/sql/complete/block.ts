import { sql } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import { newId } from '../../ids.js';
import { runTransaction } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import { LeaseLostError, OwnershipLostError } from '../../../errors.js';
import type { LeaseHandle } from '../../types.js';
import { NO_TIME } from '../common/fragments.js';
import { leaseSpec, type Finishing } from './finish.js';
import { applyTransitionInTx, transitionSettled } from '../common/transition.js';
import { lockWakeMark } from '../waits/wake-marks.js';

export type BlockFinishing = Extract<Finishing, { kind: 'block' }>;

/** What a block turned into. */
export type BlockOutcome =
  /** Parked until a wake-up, a probe or its expiry. */
  | 'blocked'
  /** The key was woken after this attempt began: back to pending at once, no attempt spent. */
  | 'woken'
  /** A re-block on the same key after its wait expired (its final run): dead, class `dependency_expired`. */
  | 'expired'
  /** This holder had lost the item: nothing written. */
  | 'lost';

interface BlockCheck {
  /** 1 when the key was woken at or after this attempt's start. */
  woken: number;
  /** 1 when the item already waited on this key and that wait has passed its maxWait. */
  expired: number;
}

/**
 * Ends an attempt that throws BlockOn(key). In one transaction: lock the
 * key's wake mark (a concurrent wakeDependency holds the same lock, so the
 * two serialise), then compare the mark with this attempt's start, both
 * from the ledger's clock. A wake the handler could not have seen sends the
 * item back to pending instead of parking it; a wait already past its
 * maxWait ends dead instead of waiting again.
 */
export async function finishBlock(
  db: LedgerDb,
  t: LedgerTables,
  h: LeaseHandle,
  f: BlockFinishing,
): Promise<BlockOutcome> {
  const blockSpec = leaseSpec(t, h, f);
  // Every outcome writes a history row under this id: after a COMMIT that went unanswered, the row tells whether it
  // took.
  const historyId = newId();
  try {
    return await runTransaction(
      db,
      async (trx) => {
        await lockWakeMark(trx, t, f.dependencyKey);
        const r = await sql<BlockCheck>`SELECT (m.woken_at >= i.started_at) AS woken,
            (i.dependency_key <=> ${
              f.dependencyKey
            } AND i.block_expires_at IS NOT NULL AND i.block_expires_at <= NOW(6)) AS expired
          FROM ${t.items} i JOIN ${t.wakeMarks} m ON m.dependency_key = ${f.dependencyKey}
          WHERE i.id = ${h.id} AND i.lease_token = ${h.leaseToken} AND i.state = 'processing'`.execute(trx);
        const check = r.rows[0];
        if (check === undefined) throw new LeaseLostError(h.id);
        if (Number(check.woken) === 1) {
          await applyTransitionInTx(
            trx,
            t,
            {
              ...leaseSpec(t, h, {
                kind: 'release',
                delayMs: 0,
                reason: `dependency ${f.dependencyKey} was woken while the attempt ran`,
              }),
              // A fresh wait next time, as after any wake-up.
              set: sql`state = 'pending', attempt = attempt - 1, lease_until = ${NO_TIME}, probe_after = NULL,
                block_expires_at = NULL, blocked_at = NULL`,
            },
            historyId,
          );
          return 'woken';
        }
        if (Number(check.expired) === 1) {
          const error = `dependency ${f.dependencyKey} not met before the wait expired`;
          await applyTransitionInTx(
            trx,
            t,
            leaseSpec(t, h, { kind: 'dead', error, failureClass: 'dependency_expired' }),
            historyId,
          );
          return 'expired';
        }
        await applyTransitionInTx(trx, t, blockSpec, historyId);
        return 'blocked';
      },
      async () => {
        const settled = await transitionSettled(db, t, blockSpec, historyId);
        return settled === 'unknown' ? undefined : settled === 'applied';
      },
    );
  } catch (error) {
    if (error instanceof LeaseLostError && !(error instanceof OwnershipLostError)) return 'lost';
    throw error;
  }
}
