/** What the producer, the handlers and the checks agree on about a chaos item. */

export const CHAOS_QUEUE = 'chaos';
export const CHAOS_TYPE = 'step';
export const EFFECTS_TABLE = 'chaos_effects';
/** Budget of every chaos item: far above what the faults may spend, so no item legitimately dies. */
export const CHAOS_MAX_ATTEMPTS = 25;

/**
 * - ok: works, then commits its effect through ctx.transaction.
 * - fail-once: throws before touching the database on its first attempt (a retry, no effect).
 * - fail-in-tx-once: writes its effect inside ctx.transaction and throws there on its first
 *   attempt, so the write must roll back with the attempt.
 * - permanent: throws PermanentError: dead with class `permanent`, no effect (the expected deaths).
 */
export type ChaosKind = 'ok' | 'fail-once' | 'fail-in-tx-once' | 'permanent';

export interface ChaosPayload {
  /** The producer's running number of the item. */
  k: number;
  kind: ChaosKind;
  workMs: number;
}

/** Error texts of the deliberate failures, so the checks can tell them from failures the faults caused. */
export const DELIBERATE_TRANSIENT = 'chaos: deliberate transient failure';
export const DELIBERATE_PERMANENT = 'chaos: deliberate permanent failure';

/** One line of the producer's record: an item the ledger acknowledged. */
export interface EnqueuedRecord {
  k: number;
  id: string;
  lane: string | null;
  laneSeq: number | null;
  kind: ChaosKind;
  duplicate: boolean;
}

/** Items are placed and typed from the seed, so a run can be repeated. */
export function planItem(
  k: number,
  lanes: number,
  random: () => number,
  work: { min: number; max: number },
): {
  lane: string | null;
  payload: ChaosPayload;
} {
  const laneless = random() < 0.2;
  const lane = laneless ? null : `lane-${Math.floor(random() * lanes)}`;
  const r = random();
  const kind: ChaosKind = r < 0.01 ? 'permanent' : r < 0.06 ? 'fail-once' : r < 0.11 ? 'fail-in-tx-once' : 'ok';
  const workMs = Math.round(work.min + random() * (work.max - work.min));
  return { lane, payload: { k, kind, workMs } };
}

export { seededRandom } from '../test/support/random.js';

/**
 * Wall-clock microseconds, comparable with the ledger's NOW(6) on this host.
 * Date.now() rather than performance.now(): the monotonic clock drifts from
 * the wall clock while NTP slews it, and the checks compare against NOW(6).
 */
export function wallUs(): number {
  return Date.now() * 1000;
}
