import { sql } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { Executor, LedgerDb } from '../../connection.js';
import { CLAIM_RETRY, retryOnConflict } from '../../retry.js';
import type { ClaimedRow } from '../../rows.js';
import type { LedgerTables } from '../../tables.js';
import type { ClaimedItem, QueueClass } from '../../types.js';
import { CLAIMED_COLUMNS, claimedItems, grantLease } from './claimed.js';
import { list } from '../common/fragments.js';
import { casClaimUnderCap } from './heads.js';
import { type ClaimSpec, withGroups, casClaim } from './cas.js';

/**
 * Claims exactly these ids if each is still a due pending head (targeted
 * wake-ups), and of `types` when given: a wake-up names items of any type,
 * and a consumer that claims only some types must not take the others.
 */
export async function claimByIds(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: ClaimSpec & { ids: readonly string[]; types?: readonly string[] | undefined },
): Promise<ClaimedItem[]> {
  if (spec.ids.length === 0) return [];
  if (spec.maxProcessing !== undefined)
    return casClaimUnderCap(db, caps, t, spec, spec.maxProcessing, { ids: spec.ids }, spec.ids.length, spec.types);
  return withGroups(
    db,
    t,
    await retryOnConflict(() => casClaim(db, caps, t, spec, spec.ids, { types: spec.types }), CLAIM_RETRY),
    spec,
  );
}

/**
 * The items held under this lease now: what a producer inserted claimed
 * under a consumer's offer whose handoff never arrived (the producer died
 * after its commit, or Redis failed then). One index range: the queue's
 * processing items of these classes.
 */
export async function readHeldUnderLease(
  exec: Executor,
  t: LedgerTables,
  spec: { queue: string; classes: readonly QueueClass[]; owner: string; token: string; leaseMs: number },
): Promise<ClaimedItem[]> {
  const lease = grantLease({ token: spec.token, owner: spec.owner, leaseMs: spec.leaseMs });
  const rows = await sql<ClaimedRow>`SELECT ${CLAIMED_COLUMNS} FROM ${t.items}
    WHERE queue = ${spec.queue} AND queue_class IN (${list(spec.classes)}) AND state = 'processing' AND lease_token = ${
      spec.token
    }`.execute(exec);
  return claimedItems(rows.rows, lease);
}
