import { channel } from 'node:diagnostics_channel';

/**
 * Process-wide diagnostics channels (node:diagnostics_channel): what a tool
 * in the same process (a tracer, a test harness, the chaos run's probe)
 * may watch without holding the consumers or the supervisor. Nothing is
 * built or sent while nobody subscribes. Times are ms since the epoch.
 *
 *   import { subscribe } from 'node:diagnostics_channel';
 *   subscribe('lanewake:reconcile-pass', (m) => console.log(m));
 */
export const DIAGNOSTICS = {
  /** A supervisor's reconciler pass over its queues (ReconcilePassMessage). */
  reconcilePass: 'lanewake:reconcile-pass',
  /** A consumer's claim round (ClaimRoundMessage). */
  claimRound: 'lanewake:claim-round',
  /** Wake entries a consumer read from Redis (WakeReadMessage). */
  wakeRead: 'lanewake:wake-read',
} as const;

export interface ReconcilePassMessage {
  /** The reconciler's interval: the pass was due this long after the previous one ended. */
  intervalMs: number;
  /** When its timer was due to fire. */
  dueAtMs: number;
  startedAtMs: number;
  /**
   * When it had read which queues have expired leases (one statement for all): a lease that ran out after
   * this waits for the next pass.
   */
  lookedAtMs: number;
  endedAtMs: number;
  queues: {
    queue: string;
    /** When its reclaim step looked for expired leases (undefined: the look said there were none). */
    reclaimStartedAtMs: number | undefined;
    /** Expired leases put back to pending, and when that committed and was announced. */
    reclaimed: readonly string[];
    reclaimedAtMs: number | undefined;
    /** Expired leases that ended the item (budget spent, cancel requested). */
    ended: readonly string[];
  }[];
  failed: readonly string[];
}

export interface ClaimRoundMessage {
  queue: string;
  consumer: string;
  startedAtMs: number;
  endedAtMs: number;
  /** Items named by wake-ups that the round tried first. */
  targeted: number;
  claimed: readonly string[];
}

export interface WakeReadMessage {
  queue: string;
  consumer: string;
  atMs: number;
  /** The item ids the entries named (none for a "look" wake-up). */
  ids: readonly string[];
  entries: number;
}

export const reconcilePassChannel = channel(DIAGNOSTICS.reconcilePass);
export const claimRoundChannel = channel(DIAGNOSTICS.claimRound);
export const wakeReadChannel = channel(DIAGNOSTICS.wakeRead);
