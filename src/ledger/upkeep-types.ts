/** What the ledger's upkeep passes report: the sweep's signals, reclaimed leases, probed dependency waits. */

/** What a sweep of one queue would find now (Ledger.sweepSignals). */
export interface SweepSignal {
  queue: string;
  /** A due head is pending: a claim would find work. */
  claimable: boolean;
  /** A lease has run out: reclaimExpired has work. */
  expiredLeases: boolean;
  /** A dependency probe is due: probeDependencyWaits has work. */
  dueProbes: boolean;
  /** The queue is paused (Ledger.pause): it claims nothing. */
  paused: boolean;
  /** The queue is fair (Ledger.setFairness): its consumers claim nothing with their completions. */
  fair: boolean;
  /** The queue claims only rescued work (Ledger.setStaleOnly): items whose lease expired, no new pending work. */
  staleOnly: boolean;
}

/** What a sweep of expired leases did. */
export interface ReclaimOutcome {
  /** Back to pending: another consumer may claim them now. */
  reclaimed: string[];
  /** Their budget was spent by the expired attempt: dead, class `lease_expired`. */
  dead: string[];
  /** A cancel was requested while they ran: the holder is gone, so the cancel completes here. */
  cancelled: string[];
}

/** An item a dependency wake-up or probe moved back to pending. */
export interface WokenItem {
  id: string;
  queue: string;
  lane: string | null;
}

/** What a sweep of due dependency probes did. */
export interface ProbeOutcome {
  /** Due for a probe (or past maxWait): back to pending so the handler checks its dependency again. */
  probed: WokenItem[];
  /**
   * Of `probed`, the ids whose wait had passed its maxWait: this run is their
   * last. If the handler blocks on the same key again, the item ends dead,
   * class `dependency_expired`; no item ends so without a final check.
   */
  expired: string[];
}
