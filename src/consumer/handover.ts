import { MAX_CLAIM_ITEMS } from '../ledger/inputs.js';
import { newLeaseToken } from '../ledger/ids.js';
import type { ClaimedItem, QueueClass } from '../ledger/types.js';

/**
 * How an item reaches a consumer already claimed, without a claim round of
 * its own (docs/design.md §6, "Lane affinity and claiming outside rounds").
 */
export type HandoverWay =
  /** A producer in this process inserted it claimed for the consumer. */
  | 'insert'
  /** A producer in any process inserted it claimed under the consumer's offer. */
  | 'offer'
  /** The transaction that completed its lane's head claimed it for the consumer. */
  | 'successor';

/** The lease a handover's items are claimed under: the same fence a claim gives. */
export interface HandoverLease {
  owner: string;
  token: string;
  leaseMs: number;
  /** The most items it takes: the room it holds. */
  max: number;
  classes: readonly QueueClass[];
  types?: readonly string[] | undefined;
}

/**
 * Room a consumer holds for items claimed for it outside its claim rounds,
 * and the lease they are claimed under. Settled once: `accept` with what was
 * claimed under the lease (any number up to `max`, none included), or
 * `cancel` when nothing was; either way the room it held frees.
 */
export interface Handover {
  readonly way: HandoverWay;
  readonly lease: HandoverLease;
  accept(items: readonly ClaimedItem[]): void;
  cancel(): void;
}

/** What the handovers need of their consumer. */
export interface HandoverHost {
  readonly owner: string;
  readonly leaseMs: number;
  readonly classes: readonly QueueClass[];
  /** The types it claims, when it claims only some. */
  readonly types: readonly string[] | undefined;
  /** Its executor slots free now, less those held here. */
  freeSlots(): number;
  /** What a claim could take now (free slots and prefetch room), less what claim rounds in flight and holds here have. */
  claimRoom(): number;
  /** claimRoom, plus what claim rounds in flight counted on within the prefetch buffer's target (ClaimScheduler.claimRoomBesideRounds). */
  claimRoomBesideRounds(): number;
  /** Running, unpaused and unfenced (no fleet-wide cap, no ownership epoch: those fence claims in SQL). */
  takesOutsideRounds(): boolean;
  /** Whether it has handlers for all these types. */
  handles(types: Iterable<string>): boolean;
  /** Items claimed for it: to run, or, if it began stopping meanwhile, to go back to the ledger. */
  take(items: readonly ClaimedItem[], claimedAtMs: number, way: HandoverWay): void;
  /** Room held here was given back. */
  roomChanged(): void;
}

/**
 * Every way in without a claim round, in one place (docs/design.md §6):
 * the room each holds and the lease it grants. Items inserted claimed (in
 * this process or through an offer) hold free executor slots, since they
 * start on arrival; a completion's lane successors hold claim room, and may
 * wait in the prefetch buffer like any claimed item.
 */
export class Handovers {
  /** Executor slots held for items arriving claimed to start at once. */
  private slotsHeld = 0;
  /** Claim room held for lane successors claimed with a completion. */
  private roomHeld = 0;

  constructor(private readonly host: HandoverHost) {}

  /** Slots held for arrivals (the consumer's free slots leave them out). */
  get heldSlots(): number {
    return this.slotsHeld;
  }

  /** Claim room held for successors (the consumer's claim room leaves it out). */
  get heldRoom(): number {
    return this.roomHeld;
  }

  /**
   * Up to `n` free slots for items a producer in this process is about to
   * insert claimed (due now, of `queueClass` and `types`; a laned item only
   * as its lane's head), or undefined if the consumer takes none of them.
   */
  atInsert(queueClass: QueueClass, types: ReadonlySet<string>, n: number): Handover | undefined {
    const host = this.host;
    if (!host.takesOutsideRounds() || !host.classes.includes(queueClass) || !host.handles(types)) return undefined;
    return this.holdSlots('insert', n, Date.now());
  }

  /**
   * Up to `room` free slots for the consumer's standing offer, claimed from
   * `madeAtMs` (the items' lease runs from no earlier than when the offer was made).
   */
  forOffer(madeAtMs: number, room: number): Handover | undefined {
    if (!this.host.takesOutsideRounds()) return undefined;
    return this.holdSlots('offer', room, madeAtMs);
  }

  /**
   * Claim room for up to `wanted` lane successors a completion batch may
   * claim (lane affinity), or items its keyed ends admit (key affinity,
   * `keyed`: beside claim rounds in flight), or undefined if none.
   */
  forSuccessors(wanted: number, keyed: boolean): Handover | undefined {
    // No type it may take outside claim rounds (every one of its types coalesces): an empty list would mean any type.
    if (!this.host.takesOutsideRounds() || this.host.types?.length === 0) return undefined;
    const room = Math.min(wanted, MAX_CLAIM_ITEMS, keyed ? this.host.claimRoomBesideRounds() : this.host.claimRoom());
    if (room <= 0) return undefined;
    this.roomHeld += room;
    return this.handover('successor', room, Date.now(), () => (this.roomHeld -= room));
  }

  /** Items of a handover already settled (a handoff after its offer was given up on): taken, holding nothing. */
  late(items: readonly ClaimedItem[], claimedAtMs: number, way: HandoverWay): void {
    if (items.length > 0) this.host.take(items, claimedAtMs, way);
  }

  private holdSlots(way: HandoverWay, n: number, claimedAtMs: number): Handover | undefined {
    const held = Math.min(n, this.host.freeSlots());
    if (held <= 0) return undefined;
    this.slotsHeld += held;
    return this.handover(way, held, claimedAtMs, () => (this.slotsHeld -= held));
  }

  private handover(way: HandoverWay, max: number, claimedAtMs: number, unhold: () => void): Handover {
    const host = this.host;
    let open = true;
    const settle = (items: readonly ClaimedItem[]): void => {
      if (!open) return;
      open = false;
      unhold();
      if (items.length > 0) host.take(items, claimedAtMs, way);
      host.roomChanged();
    };
    return {
      way,
      lease: {
        owner: host.owner,
        token: newLeaseToken(),
        leaseMs: host.leaseMs,
        max,
        classes: host.classes,
        types: host.types,
      },
      accept: settle,
      cancel: () => settle([]),
    };
  }
}
