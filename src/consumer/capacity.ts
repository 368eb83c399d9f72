/** Capacity: the one count of a consumer's room (executor slots, claim room, room held, prefetch target). */
import { assertCount } from './claim-modes.js';
import type { PrefetchBuffer } from './prefetch-buffer.js';

/**
 * A consumer's room, counted in one place. Slots are taken by running
 * handlers and held by reservations for items arriving claimed to start at
 * once; claim room is the free slots plus the prefetch buffer's room, less
 * what claim rounds in flight and reservations for successors hold.
 */
export class Capacity {
  /** Executor slots held by reservations for items that start on arrival (at insert, by offer). */
  private slotsHeld = 0;
  /** Claim room held by reservations for successors claimed with a completion. */
  private roomHeld = 0;
  /** Claim room promised to claim rounds in flight. */
  private roundsRoom = 0;

  constructor(
    private concurrency: number,
    private readonly running: { readonly size: number },
    private readonly buffer: PrefetchBuffer,
  ) {}

  /** Executor slots with no handler running, less those held by reservations (none while slots were lowered). */
  freeSlots(): number {
    return Math.max(0, this.concurrency - this.running.size - this.slotsHeld);
  }

  /** The consumer's slots changed live (Intake.retune). */
  resize(concurrency: number): void {
    this.concurrency = concurrency;
  }

  /** How many items the prefetch buffer wants to hold now (PrefetchBuffer.target). */
  prefetchTarget(): number {
    return this.buffer.target();
  }

  /** How many items a claim may take now: free slots plus prefetch room, less rounds in flight and room held. */
  claimRoom(): number {
    return this.freeSlots() + this.buffer.target() - this.buffer.size - this.roundsRoom - this.roomHeld;
  }

  /**
   * How many items keyed ends admit a completion may claim with it: the
   * claim room, plus, within the prefetch target, the room claim rounds in
   * flight counted on (why: docs/design/handover.md, "Lane affinity and claiming
   * outside rounds"). The buffer may briefly hold up to twice its target;
   * with none (prefetch off, slow handlers, a fleet cap) nothing changes.
   */
  claimRoomBesideRounds(): number {
    return this.claimRoom() + Math.min(this.roundsRoom, this.buffer.target());
  }

  /** Claim room held for successors (claim room leaves it out). */
  get heldRoom(): number {
    return this.roomHeld;
  }

  /** Holds up to `n` free slots; returns how many it held (0: none free). */
  holdSlots(n: number): number {
    const held = Math.min(n, this.freeSlots());
    if (held <= 0) return 0;
    this.slotsHeld += held;
    return held;
  }

  unholdSlots(n: number): void {
    this.slotsHeld = assertCount('slots held', this.slotsHeld - n);
  }

  holdRoom(n: number): void {
    this.roomHeld += n;
  }

  unholdRoom(n: number): void {
    this.roomHeld = assertCount('room held', this.roomHeld - n);
  }

  /** A claim round of `room` started (promised to it) or ended. */
  roundStarted(room: number): void {
    this.roundsRoom += room;
  }

  roundEnded(room: number): void {
    this.roundsRoom = assertCount('room of rounds in flight', this.roundsRoom - room);
  }
}
