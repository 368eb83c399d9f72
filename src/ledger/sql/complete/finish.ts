import { sql, type RawBuilder } from 'kysely';
import type { Executor, LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { LeaseHandle } from '../../types.js';
import { NO_TIME, nowPlusMs } from '../common/fragments.js';
import {
  applyTransition,
  applyTransitionInTx,
  type HistoryEntry,
  type LaneHandedOn,
  type TransitionSpec,
} from '../common/transition.js';
import { enterWait } from '../waits/waits.js';
import { storedKey } from '../keys/scope.js';
import { completionNeedsHistory, stagesText } from './stage-history.js';
import { epochIsCurrent, fenceOf } from '../fleet/ownership.js';
import { settleDependents, type JobEnd } from '../workflows/settle.js';

/** How a claimed attempt ended; each maps to one CAS (docs/design/states.md). */
export type Finishing =
  | { kind: 'complete'; resultJson: string | null }
  | { kind: 'dead'; error: string | null; failureClass: string }
  | { kind: 'skip'; reasonJson: string | null; reasonText: string | null }
  | { kind: 'retry'; error: string | null; failureClass: string; delayMs: number }
  | { kind: 'release'; delayMs: number; reason: string | null }
  | { kind: 'block'; dependencyKey: string; probeAfterMs: number; maxWaitMs: number; reason: string | null }
  | { kind: 'cancelled'; reason: string | null };

/** What a terminal finishing means to a workflow job's dependents. */
function endOf(f: Finishing): JobEnd {
  return f.kind === 'complete' || f.kind === 'skip' ? 'succeeded' : 'failed';
}

interface Plan {
  set: RawBuilder<unknown>;
  terminal: boolean;
  history: HistoryEntry | null;
  /** The item becomes blocked: record its wait. */
  waits?: true;
}

function plan(h: LeaseHandle, f: Finishing): Plan {
  const stages = stagesText(h.stages);
  const hist = (outcome: HistoryEntry['outcome'], failureClass: string | null, error: string | null): HistoryEntry => ({
    attempt: h.attempt,
    outcome,
    failureClass,
    error,
    worker: h.leaseOwner,
    startedAt: h.startedAt,
    stages,
  });
  switch (f.kind) {
    case 'complete':
      return {
        // An earlier attempt's error belongs to the attempt history, not to a completed item.
        set: sql`state = 'completed', result = ${
          f.resultJson
        }, last_error = NULL, failure_class = NULL, lease_until = ${NO_TIME},
          terminal_at = NOW(6)`,
        terminal: true,
        history: completionNeedsHistory(h) ? hist('completed', null, null) : null,
      };
    case 'dead':
      return {
        set: sql`state = 'dead', last_error = ${f.error}, failure_class = ${f.failureClass}, lease_until = ${NO_TIME},
          terminal_at = NOW(6)`,
        terminal: true,
        history: hist('dead', f.failureClass, f.error),
      };
    case 'skip':
      return {
        // The reason is the item's result (as given) and its last word (as text, where a cancel's reason lives too).
        set: sql`state = 'skipped', result = ${f.reasonJson}, last_error = ${
          f.reasonText
        }, failure_class = NULL, lease_until = ${NO_TIME},
          terminal_at = NOW(6)`,
        terminal: true,
        history: hist('skipped', null, f.reasonText),
      };
    case 'cancelled':
      return {
        // Without a reason of its own, the one the cancel request recorded stays.
        set: sql`state = 'cancelled', failure_class = 'cancelled', last_error = COALESCE(${
          f.reason
        }, last_error), lease_until = ${NO_TIME},
          terminal_at = NOW(6)`,
        terminal: true,
        history: hist('cancelled', 'cancelled', f.reason),
      };
    case 'retry':
      return {
        set: sql`state = 'pending', run_after = ${nowPlusMs(f.delayMs)}, last_error = ${f.error},
          failure_class = ${f.failureClass}, lease_until = ${NO_TIME}`,
        terminal: false,
        history: hist('retried', f.failureClass, f.error),
      };
    case 'release':
      // No budget burn: the attempt counted at claim is given back. Without a
      // delay (shutdown, a prefetched item handed back) the due time stays, so
      // the item keeps its place instead of queueing behind younger work.
      return {
        set:
          f.delayMs === 0
            ? sql`state = 'pending', attempt = attempt - 1, lease_until = ${NO_TIME}`
            : sql`state = 'pending', run_after = ${nowPlusMs(f.delayMs)}, attempt = attempt - 1, lease_until = ${
                NO_TIME
              }`,
        terminal: false,
        history: hist('released', null, f.reason),
      };
    case 'block': {
      // A re-block on the same key after a probe continues the same wait: its
      // start and expiry stay, so probing cannot stretch maxWait. Every
      // expression reads only the row's old values: MySQL and MariaDB assign
      // left to right (a later expression sees an earlier assignment), TiDB
      // evaluates each against the old row; this reads the same on both.
      const sameWait = sql`dependency_key <=> ${f.dependencyKey} AND block_expires_at IS NOT NULL`;
      const expiresAt = sql`IF(${sameWait}, block_expires_at, ${nowPlusMs(f.maxWaitMs)})`;
      return {
        set: sql`state = 'blocked',
          blocked_at = IF(${sameWait}, blocked_at, NOW(6)),
          probe_after = LEAST(${nowPlusMs(f.probeAfterMs)}, ${expiresAt}),
          block_expires_at = ${expiresAt},
          dependency_key = ${f.dependencyKey}, attempt = attempt - 1, lease_until = ${NO_TIME}`,
        terminal: false,
        history: hist('blocked', null, f.reason),
        waits: true,
      };
    }
  }
}

/**
 * The transition that ends a claimed attempt as `f`: a CAS on (id, lease
 * token, processing), and for a lease claimed under an ownership epoch, on
 * that epoch being still the queue's. A release alone is not fenced by the
 * epoch: it records no work, and gives the item back, attempt unspent, for
 * the queue's owner now.
 */
export function leaseSpec(t: LedgerTables, h: LeaseHandle, f: Finishing, prepared = false): TransitionSpec {
  const p = plan(h, f);
  const group = h.group;
  const fence = f.kind === 'release' ? undefined : fenceOf(h);
  return {
    // A coalesced group ends together, and its lane is handed on from its last member.
    place: {
      id: h.id,
      queue: h.queue,
      lane: h.lane,
      laneSeq: group === undefined ? h.laneSeq : group.lastSeq,
      storedKey: storedKey(h),
    },
    members:
      group === undefined
        ? undefined
        : {
            ids: group.ids,
            guard: sql`lease_token = ${h.leaseToken} AND state = 'processing'`,
            // A blocked head's members wait behind it as pending items (only the head has a wait).
            set: f.kind === 'block' ? plan(h, { kind: 'release', delayMs: 0, reason: null }).set : p.set,
          },
    guard:
      fence === undefined
        ? sql`lease_token = ${h.leaseToken} AND state = 'processing'`
        : sql`lease_token = ${h.leaseToken} AND state = 'processing' AND ${epochIsCurrent(t, fence)}`,
    fence,
    set: p.set,
    terminal: p.terminal,
    wasHead: true,
    history: p.history,
    alsoWrite: p.waits
      ? (trx) => enterWait(trx, t, h.id)
      : p.terminal && h.workflowId !== undefined
        ? // A workflow's job settles its dependents with its own end (sql/workflows/settle.ts).
          async (trx) => void (await settleDependents(trx, t, [{ id: h.id, end: endOf(f) }]))
        : undefined,
    // Only this token's holder completes the item, and it keeps the token: how a completion whose answer was lost is
    // told apart.
    appliedIf: f.kind === 'complete' ? sql`state = 'completed' AND lease_token = ${h.leaseToken}` : undefined,
    prepared,
  };
}

/**
 * Ends a claimed attempt: CAS on (id, lease token, processing); `prepared` as LedgerCapabilities says. False = this
 * holder lost the item; nothing was written.
 * Throws OwnershipLostError (nothing written) when the lease's ownership epoch is no longer the queue's.
 */
export function finishItem(
  db: LedgerDb,
  t: LedgerTables,
  h: LeaseHandle,
  f: Finishing,
  prepared = false,
): Promise<boolean> {
  return applyTransition(db, t, leaseSpec(t, h, f, prepared));
}

/**
 * The same inside the caller's transaction; throws LeaseLostError, or OwnershipLostError, (rolling the caller back)
 * when the CAS loses.
 */
export function finishItemInTx(
  trx: Executor,
  t: LedgerTables,
  h: LeaseHandle,
  f: Finishing,
  prepared = false,
): Promise<LaneHandedOn> {
  return applyTransitionInTx(trx, t, leaseSpec(t, h, f, prepared));
}
