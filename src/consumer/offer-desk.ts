/** Offer desk: a consumer's standing offers to producers, and the recovery of a taken offer's lost handoff. */
import type { ClaimedItem } from '../ledger/types.js';
import type { Logger } from '../log.js';
import type { Handoff, Offer } from '../wake/messages.js';
import type { Offers, PostedOffer } from '../wake/offers.js';
import type { ConsumerCounters } from './counters.js';
import type { Eligibility } from './eligibility.js';
import type { Intake } from './intake.js';
import type { IntakeSource } from './intake-source.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { ConsumerSettings } from './options.js';
import type { Reservation, Reservations } from './reservations.js';

/** How long an offer stands before its consumer replaces it; a dead consumer's offers die with it this fast. */
export const OFFER_TTL_MS = 3000;
/** An offer older than this is replaced at the next look. */
const OFFER_REFRESH_AGE_MS = OFFER_TTL_MS / 2;
/** How often the desk looks at its offer. */
const LOOK_INTERVAL_MS = 1000;
/** Offers are posted only while the consumer claimed an item this recently: an idle queue costs no Redis traffic. */
export const OFFER_WARM_MS = 10_000;
/** A taken offer whose handoff did not come: the ledger is asked after each of these waits (ms since found taken). */
const RECOVERY_AFTER_MS = [1_000, 3_000, 8_000] as const;
/**
 * Consumers with shorter leases make no offers. An item handed off runs on a
 * lease counted from when its offer was made (up to OFFER_TTL_MS earlier), and
 * one recovered from the ledger is found up to 8 s after that: both must be
 * well inside the lease (a prefetched item starts only within two thirds of
 * it), or the item would go back unstarted, or its lease expire unrenewed.
 */
export const MIN_OFFER_LEASE_MS = 24_000;

/**
 * Offers one consumer stands at once. A producer takes one offer per batch,
 * and an offer taken is gone until its handoff comes and the next is posted:
 * on a slower ledger a producer's next enqueue often found none with a single
 * offer standing (measured: docs/BENCHMARKS.md).
 */
const MAX_STANDING_OFFERS = 4;

/**
 * Free slots a consumer standing `standing` offers needs for one more: 2 for the first, 4 for the second, and so on.
 */
function slotsForAnother(standing: number): number {
  return 2 * (standing + 1);
}

/** The most slots one offer holds. */
export const OFFER_MAX_ROOM = 8;

/**
 * The slots an offer holds, of `free`: a fifth of them, up to
 * OFFER_MAX_ROOM, at least one, so that the offers a consumer stands
 * together hold about half its slots and the rest stay for claim rounds.
 * A producer batches the single enqueues that arrive together
 * (src/producer/enqueue-batcher.ts) and takes one offer per batch, so an
 * offer of one slot handed off one item of a batch and left the rest to
 * wake-ups and claim rounds.
 */
export function offerRoom(free: number): number {
  return Math.max(1, Math.min(OFFER_MAX_ROOM, Math.floor(free / (MAX_STANDING_OFFERS + 1))));
}

/** The parts of its consumer the desk works with. */
export interface OfferDeskParts {
  readonly name: string;
  readonly settings: Pick<ConsumerSettings, 'queue' | 'classes' | 'leaseMs'>;
  /** Which types it may be handed at insert, and whether items claimed outside its rounds may come now. */
  readonly eligible: Pick<Eligibility, 'offerTypes' | 'takesOutsideRounds'>;
  /** Its claim side: free slots, and whether it has caught up with its queue (only then are offers worth making). */
  readonly claims: { readonly intake: Pick<Intake, 'capacity'>; caughtUp(): boolean };
  /** `claimed` grows with every item the consumer claims (any way): the desk's sign that the queue is warm. */
  readonly counters: Pick<ConsumerCounters, 'claimed' | 'offersMade' | 'handoffsRecovered'>;
  /** Asked for the items held under a taken offer's token (recovery of a lost handoff). */
  readonly ledger: Pick<ConsumerLedger, 'heldUnderLease'>;
  readonly log: Logger;
}

/** What the desk uses of the wake channel's offers. */
export type OfferPort = Pick<Offers, 'post' | 'withdraw'>;

/**
 * One offer of this consumer, holding slots (its reservation) until settled (handed off, withdrawn, recovered, given
 * up).
 */
interface MyOffer {
  offer: Offer;
  reservation: Reservation;
  posted?: PostedOffer;
  state: 'posting' | 'standing' | 'withdrawing' | 'taken';
  /** When it was found taken (its handoff not yet come). */
  takenAtMs?: number;
  asked: number;
}

/**
 * A consumer's offers (docs/design/handover.md, "Through an offer"): while it is
 * warm, has caught up with its queue and has two or more free slots, it
 * stands up to MAX_STANDING_OFFERS offers in Redis, each holding a fifth of
 * its free slots. A producer that pops one inserts its items claimed under
 * it and hands them over; the consumer starts them without a claim. The desk replaces its
 * offer before it expires, withdraws it when the slots fill up or the
 * consumer pauses or stops, and when a taken offer's handoff never arrives
 * it asks the ledger for the items under the offer's token, so nothing
 * inserted under an offer waits for its lease to expire.
 */
export class OfferDesk {
  /** Every offer not yet settled, by token: each holds one slot. */
  private readonly mine = new Map<string, MyOffer>();
  private lastActivity = 0;
  private lastActiveAtMs = Number.NEGATIVE_INFINITY;
  private timer: NodeJS.Timeout | undefined;
  private looking: Promise<void> | undefined;
  private lookAgain = false;
  private releasing = false;
  /** After a post Redis refused, none before this. */
  private noPostUntil = 0;
  private stopped = false;

  constructor(
    private readonly parts: OfferDeskParts,
    private readonly reservations: Reservations,
    private readonly port: OfferPort,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.look(true), LOOK_INTERVAL_MS);
    this.timer.unref();
  }

  /** Room changed (a job ended or started, a pause): look now. `always`: also at an offer's age (the desk's clock). */
  look(always = false): void {
    // The desk's own freeing of a slot changes the room too: that is no reason to look again.
    if (this.releasing) return;
    // Called as every job ends: most of the time there is nothing to do, and that is found here.
    if (!always && !this.looking && !this.worthALook()) return;
    // The clock's look at a cold queue with no offer: nothing to do (an idle worker of 200 queues stays idle).
    if (always && !this.looking && this.mine.size === 0 && !this.warm(Date.now())) return;
    if (this.looking) {
      this.lookAgain = true;
      return;
    }
    this.looking = Promise.resolve()
      .then(() => this.lookOnce())
      .catch((error: unknown) => this.parts.log.debug({ err: (error as Error).message }, 'offer look failed'))
      .finally(() => {
        this.looking = undefined;
        if (this.lookAgain) {
          this.lookAgain = false;
          this.look();
        }
      });
  }

  /**
   * A handoff on the queue's control stream naming this consumer. One that
   * names its items without carrying them all (too large to broadcast, or
   * damaged) has them read from the ledger now.
   */
  handOff(m: Handoff): void {
    if (m.items.length >= m.count) this.accept(m.token, m.items);
    else void this.fromLedger(m.token);
  }

  private freeSlots(): number {
    return this.parts.claims.intake.capacity.freeSlots();
  }

  /** The items the ledger holds under `token` now (recovery of a lost handoff). */
  private heldUnderLease(token: string): Promise<ClaimedItem[]> {
    const { queue, classes, leaseMs } = this.parts.settings;
    return this.parts.ledger.heldUnderLease({ queue, classes, owner: this.parts.name, token, leaseMs });
  }

  private accept(token: string, items: readonly ClaimedItem[]): void {
    const mine = this.mine.get(token);
    if (mine) {
      this.settle(mine, items);
      return;
    }
    // Taken even when the offer was given up on (a late handoff): the buffer holds it until a slot frees.
    this.reservations.late(items, Date.now() - this.parts.settings.leaseMs / 2, 'offer');
  }

  private async fromLedger(token: string): Promise<void> {
    const items = await this.heldUnderLease(token).catch(() => undefined);
    // Not readable now: the offer stays unsettled, and the desk's looks settle it from the ledger.
    if (!items) return;
    this.accept(token, items);
  }

  /**
   * Withdraws the standing offer, then waits up to `handoffWaitMs` for the
   * handoffs of taken ones. Call while the consumer still reads its control
   * stream; recoverRest() then asks the ledger for the rest.
   */
  async stop(handoffWaitMs: number): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.looking;
    for (const m of [...this.mine.values()]) if (m.state === 'standing') await this.withdraw(m);
    const deadline = Date.now() + handoffWaitMs;
    while (this.mine.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  }

  /** After stop(), once the control stream is no longer read: items the ledger holds under taken offers come in. */
  async recoverRest(): Promise<void> {
    for (const m of [...this.mine.values()]) await this.recover(m, true);
  }

  private async lookOnce(): Promise<void> {
    const now = Date.now();
    let standing = 0;
    for (const m of [...this.mine.values()]) {
      if (m.state === 'standing') {
        const keep =
          !this.stopped &&
          now - m.offer.madeAtMs < OFFER_REFRESH_AGE_MS &&
          this.freeSlots() > 0 &&
          this.parts.eligible.takesOutsideRounds() &&
          this.warm(now);
        if (keep) standing++;
        else await this.withdraw(m);
      } else if (m.state === 'taken') {
        const due = RECOVERY_AFTER_MS[m.asked];
        if (due === undefined || now - (m.takenAtMs ?? now) >= due)
          await this.recover(m, m.asked + 1 >= RECOVERY_AFTER_MS.length);
      } else {
        standing++;
      }
    }
    // Up to the most a consumer stands: an offer taken or withdrawn is replaced by this look, not the next.
    while (standing < MAX_STANDING_OFFERS && (await this.postOne(now, standing))) standing++;
  }

  /** Posts one more offer if the consumer can stand it now; whether it stands. */
  private async postOne(now: number, standing: number): Promise<boolean> {
    if (this.stopped || this.parts.settings.leaseMs < MIN_OFFER_LEASE_MS || now < this.noPostUntil) return false;
    if (
      !this.warm(now) ||
      this.freeSlots() < slotsForAnother(standing) ||
      !this.parts.claims.caughtUp() ||
      !this.parts.eligible.takesOutsideRounds()
    )
      return false;
    const types = this.parts.eligible.offerTypes();
    if (!types || types.length === 0) return false;
    const reservation = this.reservations.forOffer(now, offerRoom(this.freeSlots()));
    if (!reservation) return false;
    const { owner, token, leaseMs, max: room } = reservation.lease;
    const offer: Offer = {
      owner,
      token,
      leaseMs,
      classes: this.parts.settings.classes,
      types,
      expiresAtMs: now + OFFER_TTL_MS,
      madeAtMs: now,
      room,
    };
    const m: MyOffer = { offer, reservation, state: 'posting', asked: 0 };
    this.mine.set(offer.token, m);
    const posted = await this.port.post(this.parts.settings.queue, offer, OFFER_TTL_MS * 4);
    if (!this.mine.has(offer.token)) return false; // handed off before the post's answer came
    if (!posted) {
      this.noPostUntil = now + LOOK_INTERVAL_MS;
      this.settle(m, []);
      return false;
    }
    this.parts.counters.offersMade += 1;
    m.posted = posted;
    m.state = 'standing';
    if (!this.stopped) return true;
    await this.withdraw(m);
    return false;
  }

  /** A standing offer to withdraw, a taken one to settle, or room for a new one. */
  private worthALook(): boolean {
    for (const m of this.mine.values()) {
      if (m.state !== 'standing' || this.freeSlots() === 0 || !this.parts.eligible.takesOutsideRounds()) return true;
    }
    return (
      this.mine.size < MAX_STANDING_OFFERS &&
      !this.stopped &&
      this.freeSlots() >= slotsForAnother(this.mine.size) &&
      this.parts.claims.caughtUp()
    );
  }

  private warm(now: number): boolean {
    const activity = this.parts.counters.claimed;
    if (activity !== this.lastActivity) {
      this.lastActivity = activity;
      this.lastActiveAtMs = now;
    }
    return now - this.lastActiveAtMs < OFFER_WARM_MS;
  }

  private async withdraw(m: MyOffer): Promise<void> {
    if (!m.posted) return;
    m.state = 'withdrawing';
    const withdrawn = await this.port.withdraw(this.parts.settings.queue, m.posted);
    if (!this.mine.has(m.offer.token)) return; // handed off meanwhile
    if (withdrawn === true) {
      this.settle(m, []);
      return;
    }
    // Taken (or Redis did not say): its handoff may be on the way; if not, the ledger knows.
    m.state = 'taken';
    m.takenAtMs = Date.now();
  }

  /** The offer is settled: its reservation takes the items (if any), and its slots are free again. */
  private settle(m: MyOffer, items: readonly ClaimedItem[], source: IntakeSource = 'offer'): void {
    if (!this.mine.delete(m.offer.token)) return;
    this.releasing = true;
    try {
      m.reservation.accept(items, source);
    } finally {
      this.releasing = false;
    }
  }

  private async recover(m: MyOffer, last: boolean): Promise<void> {
    m.asked++;
    const items = await this.heldUnderLease(m.offer.token).catch(() => undefined);
    if (!this.mine.has(m.offer.token)) return; // handed off meanwhile
    if (items && items.length > 0) {
      this.parts.counters.handoffsRecovered += items.length;
      this.parts.log.info(
        { token: m.offer.token, items: items.length },
        'an offer was taken and its handoff lost: its items were found in the ledger',
      );
      this.settle(m, items, 'recovered');
      return;
    }
    // Nothing under it after the last look: the producer failed before its commit; the slot is free again.
    if (last) this.settle(m, []);
  }
}
