// The names of the ways an item enters a consumer, apart from the intake itself so that what only names them
// (reservations, offers, the wake route) does not import the consumer's run machinery.
import type { ClaimedItem } from '../ledger/types.js';
import type { Prefetched } from './prefetch-buffer.js';

/**
 * Every way an item reaches a consumer claimed (docs/design/consumer.md):
 *
 * - `round`: claimed by id, named by a wake-up read from Redis (or a dependency message);
 * - `wake`: claimed by id, named by a wake-up a producer in this process passed directly;
 * - `head-search`: found by a claim round's search for heads;
 * - `insert`: inserted claimed for it by a producer in this process;
 * - `offer`: inserted claimed under its offer by a producer in any process, handed off on the control stream;
 * - `recovered`: inserted under its offer, the handoff lost, found in the ledger;
 * - `lane-successor`: claimed by the completion of its lane's head (lane affinity);
 * - `key-successor`: admitted by a keyed item's end and claimed with it (key affinity).
 */
export type IntakeSource =
  | 'round'
  | 'wake'
  | 'head-search'
  | 'insert'
  | 'offer'
  | 'recovered'
  | 'lane-successor'
  | 'key-successor';

/** The sources whose items arrive under a reservation (reservations.ts) rather than by a claim round. */
export type ReservedSource = 'insert' | 'offer' | 'lane-successor' | 'key-successor';

/** One claimed item as it enters: where from, and when its claim began (its lease runs from about then). */
export interface Arrival extends Prefetched {
  readonly source: IntakeSource;
}

/** Items claimed together from one source. */
export function arrivals(items: readonly ClaimedItem[], claimedAtMs: number, source: IntakeSource): Arrival[] {
  return items.map((item) => ({ item, claimedAtMs, source }));
}
