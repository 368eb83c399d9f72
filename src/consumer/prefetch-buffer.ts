import type { ClaimedItem } from '../ledger/types.js';

/** The buffer aims to hold what the slots will start within this long, given recent handler times. */
const PREFETCH_HORIZON_MS = 250;
/** Handler times are floored at this (a no-op takes microseconds), so the buffer size stays finite. */
const MIN_HANDLER_MS = 0.01;
/** Weight of the newest handler time in the moving average. */
const HANDLER_MS_WEIGHT = 0.1;
/** Weight of the newest claim call's time as claims get faster (a slower one counts in full at once). */
const CLAIM_MS_WEIGHT = 0.3;
/** A claim slow enough to turn prefetch off is reported at most this often. */
const SLOW_CLAIM_REPORT_MS = 60_000;

export interface Prefetched {
  item: ClaimedItem;
  /** When the claim that took it began (ms since the epoch): its lease runs from about then. */
  claimedAtMs: number;
}

export interface PrefetchSizing {
  /** Executor slots of the consumer. */
  concurrency: number;
  /** The most items the buffer may hold; 0 turns prefetch off. */
  limit: number;
  /** Lease length of the claims: an item waits at most a third of it. */
  leaseMs: number;
}

/**
 * Claimed items that wait for an executor slot, oldest first (docs/design/consumer.md,
 * Prefetch). Sized from how long handlers recently took: fast handlers get a
 * deep buffer (fewer claim statements per item, claims overlapping
 * execution), slow ones none, so a busy replica does not sit on work an idle
 * one could run. Handler time rather than a rate of starts: slots filled
 * together settle together, and a burst reads as a rate it is not.
 * No I/O: what goes back to the ledger is the caller's to release.
 */
export class PrefetchBuffer {
  private readonly items: Prefetched[] = [];
  /** Recent handler time (ms, moving average); undefined until one settles. */
  private handlerMs: number | undefined;
  /**
   * Recent claim call time (ms): what an item has waited already when it
   * arrives. A slower claim counts at once, so the claims after the first
   * slow one hand nothing back; faster ones bring it down gradually.
   */
  private claimMs = 0;
  private slowClaimReportedAtMs = -Infinity;

  constructor(private readonly sizing: PrefetchSizing) {}

  get size(): number {
    return this.items.length;
  }

  /** The consumer's slots or prefetch limit changed live (Intake.retune). */
  resize(concurrency: number, limit: number): void {
    this.sizing.concurrency = concurrency;
    this.sizing.limit = limit;
  }

  /**
   * How many items the buffer wants to hold now: what the slots start within
   * the horizon, and within what is left of a third of the lease once a
   * claim has answered. Claims that take a third of the lease leave nothing:
   * prefetch is off, and each claim takes only what free slots start at once,
   * rather than items that would go back unstarted as soon as they arrive.
   */
  target(): number {
    if (this.handlerMs === undefined) return 0;
    const horizonMs = Math.min(PREFETCH_HORIZON_MS, this.sizing.leaseMs / 3 - this.claimMs);
    if (horizonMs <= 0) return 0;
    const perSlot = horizonMs / Math.max(this.handlerMs, MIN_HANDLER_MS);
    return Math.min(this.sizing.limit, Math.floor(this.sizing.concurrency * perSlot));
  }

  /**
   * A claim call took `ms` from sending to its answer. Returns true when it
   * took a third of the lease or more, and that was not reported within the
   * last minute: the caller then says so (the lease is short for this server).
   */
  noteClaimMs(ms: number, nowMs: number): boolean {
    this.claimMs = Math.max(ms, this.claimMs + (ms - this.claimMs) * CLAIM_MS_WEIGHT);
    if (ms < this.sizing.leaseMs / 3 || nowMs - this.slowClaimReportedAtMs < SLOW_CLAIM_REPORT_MS) return false;
    this.slowClaimReportedAtMs = nowMs;
    return true;
  }

  /** A handler settled after `ms`. */
  noteHandlerMs(ms: number): void {
    this.handlerMs = this.handlerMs === undefined ? ms : this.handlerMs + (ms - this.handlerMs) * HANDLER_MS_WEIGHT;
  }

  push(items: readonly ClaimedItem[], claimedAtMs: number): void {
    for (const item of items) this.items.push({ item, claimedAtMs });
  }

  /** Items as they entered (intake.ts), kept as given. */
  add(items: readonly Prefetched[]): void {
    for (const p of items) this.items.push(p);
  }

  has(id: string): boolean {
    return this.items.some((p) => p.item.id === id);
  }

  /**
   * Takes up to `freeSlots` items to start now, oldest first, and every item
   * that must go back unstarted: one waits at most a third of its lease; one
   * that finds a free slot still starts while a third of its lease is left
   * (its first renewal is then due at once), so a claim slowed by a busy
   * database does not return what it just claimed for free slots.
   */
  take(freeSlots: number, nowMs: number): { start: Prefetched[]; expired: Prefetched[] } {
    const start: Prefetched[] = [];
    const expired: Prefetched[] = [];
    const ttlMs = this.sizing.leaseMs / 3;
    const startableMs = (this.sizing.leaseMs * 2) / 3;
    while (start.length < freeSlots && this.items.length > 0) {
      const next = this.items.shift()!;
      if (nowMs - next.claimedAtMs > startableMs) expired.push(next);
      else start.push(next);
    }
    while (this.items.length > 0 && nowMs - this.items[0]!.claimedAtMs > ttlMs) expired.push(this.items.shift()!);
    return { start, expired };
  }

  /** Empties the buffer (at stop): everything in it goes back unstarted. */
  drain(): Prefetched[] {
    return this.items.splice(0);
  }
}
