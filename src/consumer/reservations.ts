/** Reservations: room a consumer holds for items claimed for it elsewhere (at insert, by offer, with a completion). */
import { MAX_CLAIM_ITEMS } from '../ledger/inputs.js';
import { newLeaseToken } from '../ledger/ids.js';
import type { ClaimedItem, QueueClass } from '../ledger/types.js';
import type { Capacity } from './capacity.js';
import { arrivals, type Arrival, type IntakeSource, type ReservedSource } from './intake-source.js';

/** The lease a reservation's items are claimed under: the same fence a claim gives. */
export interface ReservationLease {
  owner: string;
  token: string;
  leaseMs: number;
  /** The most items it takes: the room it holds. */
  max: number;
  classes: readonly QueueClass[];
  types?: readonly string[] | undefined;
}

/**
 * Room a consumer holds for items claimed for it without a claim round of
 * its own (docs/design/handover.md, "Lane affinity and claiming outside rounds"),
 * and the lease they are claimed under. Settled once: `accept` with what was
 * claimed under the lease (any number up to `max`, none included), or
 * `cancel` when nothing was; either way the room it held frees.
 */
export interface Reservation {
  readonly source: ReservedSource;
  readonly lease: ReservationLease;
  /** `as`: the items came another way than reserved for (an offer's items recovered from the ledger). */
  accept(items: readonly ClaimedItem[], as?: IntakeSource): void;
  cancel(): void;
}

/** What its consumer may take outside claim rounds (eligibility.ts). */
export interface OutsideRounds {
  /** The types it claims, when it claims only some. */
  readonly reservedTypes: readonly string[] | undefined;
  /** Running, unpaused and unfenced (no fleet-wide cap, no ownership epoch: those fence claims in SQL). */
  takesOutsideRounds(): boolean;
  /** Whether it has handlers for all these types. */
  handles(types: Iterable<string>): boolean;
}

/** The claim side reservations feed: its intake, and its answer to room given back. */
export interface ReservationsClaims {
  /** Items claimed for it go into the intake (to run, or back to the ledger if it began stopping meanwhile). */
  readonly intake: { take(arrivals: readonly Arrival[]): void; readonly capacity: Capacity };
  /** Room held here was given back. */
  roomReturned(): void;
}

/**
 * Every reservation of a consumer, in one place (docs/design/consumer.md): the
 * room each holds and the lease it grants. Items inserted claimed (in this
 * process or through an offer) hold free executor slots, since they start
 * on arrival; a completion's successors hold claim room, and may wait in
 * the prefetch buffer like any claimed item.
 */
export class Reservations {
  private readonly capacity: Capacity;

  constructor(
    /** Whose reservations: the owner and lease their items are claimed under, the classes they may be of. */
    private readonly consumer: {
      readonly name: string;
      readonly leaseMs: number;
      readonly classes: readonly QueueClass[];
    },
    /** Which types may come outside claim rounds, and whether any may now (eligibility.ts). */
    private readonly eligible: OutsideRounds,
    private readonly claims: ReservationsClaims,
  ) {
    this.capacity = claims.intake.capacity;
  }

  /**
   * Up to `n` free slots for items a producer in this process is about to
   * insert claimed (due now, of `queueClass` and `types`; a laned item only
   * as its lane's head), or undefined if the consumer takes none of them.
   */
  atInsert(queueClass: QueueClass, types: ReadonlySet<string>, n: number): Reservation | undefined {
    if (!this.eligible.takesOutsideRounds() || !this.consumer.classes.includes(queueClass)) return undefined;
    if (!this.eligible.handles(types)) return undefined;
    return this.holdSlots('insert', n, Date.now());
  }

  /**
   * Up to `room` free slots for the consumer's standing offer, claimed from
   * `madeAtMs` (the items' lease runs from no earlier than when the offer was made).
   */
  forOffer(madeAtMs: number, room: number): Reservation | undefined {
    if (!this.eligible.takesOutsideRounds()) return undefined;
    return this.holdSlots('offer', room, madeAtMs);
  }

  /**
   * Claim room for up to `wanted` lane successors a completion batch may
   * claim (lane affinity), or items its keyed ends admit (key affinity,
   * `keyed`: beside claim rounds in flight), or undefined if none.
   */
  forSuccessors(wanted: number, keyed: boolean): Reservation | undefined {
    // No type it may take outside claim rounds (every one of its types coalesces): an empty list would mean any type.
    if (!this.eligible.takesOutsideRounds() || this.eligible.reservedTypes?.length === 0) return undefined;
    const capacity = this.capacity;
    const room = Math.min(wanted, MAX_CLAIM_ITEMS, keyed ? capacity.claimRoomBesideRounds() : capacity.claimRoom());
    if (room <= 0) return undefined;
    capacity.holdRoom(room);
    const source = keyed ? 'key-successor' : 'lane-successor';
    return this.reservation(source, room, Date.now(), () => capacity.unholdRoom(room));
  }

  /** Items of a reservation already settled (a handoff after its offer was given up on): taken, holding nothing. */
  late(items: readonly ClaimedItem[], claimedAtMs: number, source: IntakeSource): void {
    if (items.length > 0) this.claims.intake.take(arrivals(items, claimedAtMs, source));
  }

  private holdSlots(source: ReservedSource, n: number, claimedAtMs: number): Reservation | undefined {
    const held = this.capacity.holdSlots(n);
    if (held <= 0) return undefined;
    return this.reservation(source, held, claimedAtMs, () => this.capacity.unholdSlots(held));
  }

  private reservation(source: ReservedSource, max: number, claimedAtMs: number, unhold: () => void): Reservation {
    const { name, leaseMs, classes } = this.consumer;
    let open = true;
    const settle = (items: readonly ClaimedItem[], as: IntakeSource): void => {
      if (!open) return;
      open = false;
      unhold();
      if (items.length > 0) this.claims.intake.take(arrivals(items, claimedAtMs, as));
      this.claims.roomReturned();
    };
    return {
      source,
      lease: {
        owner: name,
        token: newLeaseToken(),
        leaseMs,
        max,
        classes,
        types: this.eligible.reservedTypes,
      },
      accept: (items, as = source) => settle(items, as),
      cancel: () => settle([], source),
    };
  }
}
