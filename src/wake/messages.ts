import type { ClaimedItem, QueueClass } from '../ledger/types.js';

// Every message lanewake carries through Redis (docs/design/wake.md): wake-ups
// on the wake streams, broadcasts on the control stream, and the offers
// consumers stand in a queue's list. The codecs live with the commands that
// send them (streams.ts, control.ts, offers.ts).

export type WakeKind = 'enqueue' | 'advance' | 'timer' | 'dependency' | 'replay' | 'reclaim';

/** A wake-up: a hint that these items (or some heads of this queue) are claimable now. */
export interface WakeMessage {
  kind: WakeKind;
  lane?: string | null;
  ids: readonly string[];
  /** When the work was committed (ms since epoch), for latency metrics. */
  enqueuedAtMs?: number;
  /** More items are claimable than `ids` names (the list was cut): claim beyond the named ones too. */
  more?: boolean;
}

/** A wake-up as read from one of a queue's streams: acknowledged by its entry id once acted on. */
export interface WakeEntry extends WakeMessage {
  stream: string;
  entryId: string;
  queueClass: QueueClass;
}

/** Broadcasts every process of a queue must see (plain XREAD, no group). */
export type ControlMessage =
  | { type: 'dependency'; key: string; ids: string[] }
  | { type: 'ownership'; epoch: number; deployment: string }
  | { type: 'pause' }
  | { type: 'resume' }
  /** The ledger holds a cancel request for these running items: their holders ask it now, not at the next renewal. */
  | { type: 'cancel'; ids: string[] }
  | Handoff;

/**
 * Items a producer inserted claimed under consumer `to`'s offer `token`,
 * `count` of them: that consumer starts them. `items` holds fewer than
 * `count` (none) when they were too large to broadcast, or arrived damaged:
 * the consumer then reads them from the ledger by the token.
 */
export interface Handoff {
  type: 'handoff';
  to: string;
  token: string;
  count: number;
  items: ClaimedItem[];
}

/** One message read from a queue's control stream. */
export interface ControlEntry {
  queue: string;
  entryId: string;
  message: ControlMessage;
}

/**
 * A consumer's standing offer to take one item of its queue the moment it is
 * inserted (docs/design/handover.md, "Through an offer"): a producer in any process
 * that takes it inserts its item already claimed under the offer's lease, then
 * hands the claimed item over on the queue's control stream. The job starts
 * after one commit, not two (no claim round trip).
 */
export interface Offer {
  /** The consumer's name: the lease owner. */
  owner: string;
  /** The lease token the item is inserted under. */
  token: string;
  leaseMs: number;
  classes: readonly QueueClass[];
  /** The item types the consumer has handlers for. */
  types: readonly string[];
  /** After this (the consumer's clock, ms since epoch) no producer may use it: its consumer may be gone. */
  expiresAtMs: number;
  /** When the consumer made it: the lease runs from no earlier than this. */
  madeAtMs: number;
  /** How many items it takes (the slots it holds); 1 when absent. */
  room?: number;
}
