/** Intake: the one way in for claimed items, whatever their source; they wait for a slot, then start or go back. */
import type { Arrival, IntakeSource } from './intake-source.js';
import type { ClaimedItem } from '../ledger/types.js';
import type { Logger } from '../log.js';
import { Capacity } from './capacity.js';
import type { ConsumerCounters } from './counters.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { ConsumerSettings } from './options.js';
import { PrefetchBuffer } from './prefetch-buffer.js';
import { Returns } from './returns.js';

export { arrivals, type Arrival, type IntakeSource, type ReservedSource } from './intake-source.js';

/** The counter each source outside claim rounds adds to (besides `claimed`). */
const SOURCE_COUNTER = {
  round: undefined,
  wake: undefined,
  'head-search': undefined,
  insert: 'claimedAtInsert',
  offer: 'handedOver',
  recovered: 'handedOver',
  'lane-successor': 'claimedWithCompletion',
  'key-successor': 'claimedWithCompletion',
} as const satisfies Record<IntakeSource, keyof ConsumerCounters | undefined>;

/** Sources a claim round claims: while the consumer stops, their items wait in the buffer for stop() to return. */
const BY_ROUND: ReadonlySet<IntakeSource> = new Set(['round', 'wake', 'head-search']);

/** What the intake needs of the executor slots it feeds. */
export interface IntakeSlots {
  /** Handlers running: each holds a slot. */
  readonly running: { readonly size: number };
  /** The consumer claims (started, not stopping). */
  claiming(): boolean;
  /** The queue is paused (queue-flags.ts): nothing starts. */
  paused(): boolean;
  start(item: ClaimedItem, claimedAtMs: number): void;
  /** Items went back to the ledger: they are claimable again. */
  returned(): void;
  /** Saturated with work left over: pass a wake-up on so an idle replica joins in. */
  followUp(): Promise<void>;
}

/**
 * Claimed items enter here, from any source, and wait in the prefetch
 * buffer until a slot is free. Those that will not start here (waited too
 * long, the queue paused, no prefetch and no slot, the consumer stopping)
 * go back to the ledger unstarted.
 */
export class Intake {
  readonly buffer: PrefetchBuffer;
  readonly capacity: Capacity;
  private readonly returns: Returns;
  /** Items in the prefetch buffer named by a cancel message: each asks the ledger as it starts. */
  private readonly cancelHints = new Set<string>();
  private prefetchOff: boolean;

  constructor(
    settings: ConsumerSettings,
    ledger: Pick<ConsumerLedger, 'release'>,
    private readonly counters: ConsumerCounters,
    log: Logger,
    private readonly slots: IntakeSlots,
  ) {
    // A fleet-wide cap counts prefetched items as processing: keep the cap tight, no prefetch.
    const limit = settings.maxProcessing !== undefined ? 0 : settings.prefetch;
    this.prefetchOff = limit === 0;
    this.buffer = new PrefetchBuffer({ concurrency: settings.concurrency, limit, leaseMs: settings.leaseMs });
    this.capacity = new Capacity(settings.concurrency, slots.running, this.buffer);
    this.returns = new Returns(ledger, counters, log, {
      leaving: (id) => this.cancelHints.delete(id),
      gone: () => slots.returned(),
    });
  }

  /**
   * Slots or the fleet cap changed live (Consumer.retune): the room is counted from them from now on. Fewer
   * slots than handlers running: no slot frees until enough of them end; under a cap the buffer goes.
   */
  retune(settings: ConsumerSettings): void {
    const limit = settings.maxProcessing !== undefined ? 0 : settings.prefetch;
    this.prefetchOff = limit === 0;
    this.buffer.resize(settings.concurrency, limit);
    this.capacity.resize(settings.concurrency);
    this.startBuffered();
  }

  /** Items claimed together (one source or several): into the buffer, or back if reserved ones came while stopping. */
  take(arrivals: readonly Arrival[]): void {
    if (arrivals.length === 0) return;
    for (const a of arrivals) {
      const counter = SOURCE_COUNTER[a.source];
      if (counter !== undefined) this.counters[counter]++;
    }
    this.counters.claimed += arrivals.length;
    if (!BY_ROUND.has(arrivals[0]!.source) && !this.slots.claiming()) {
      this.returns.releaseLate(arrivals, 'consumer stopping');
      return;
    }
    this.buffer.add(arrivals);
    this.startBuffered();
  }

  /** Starts buffered items while slots are free; returns those that waited too long. */
  startBuffered(): void {
    if (!this.slots.claiming()) return;
    // Paused: nothing starts; what a round in flight at the pause claimed, or the buffer held, goes back unstarted.
    if (this.slots.paused()) {
      if (this.buffer.size > 0) void this.returns.release(this.buffer.drain(), 'queue paused');
      return;
    }
    const { start, expired } = this.buffer.take(this.capacity.freeSlots(), Date.now());
    for (const p of start) this.slots.start(p.item, p.claimedAtMs);
    if (expired.length > 0) void this.returns.release(expired, 'prefetch wait exceeded a third of the lease');
    // Without a prefetch buffer, items claimed beyond the free slots (an arrival at insert took a slot a
    // round in flight counted on) go back at once, keeping their place, and a wake-up tells the others.
    if (this.prefetchOff && this.buffer.size > 0) {
      void this.returns.release(this.buffer.drain(), 'no free slot').then(() => this.slots.followUp());
    }
  }

  /** A cancel was requested for `id`: if it waits in the buffer, it asks the ledger as it starts. */
  hintCancel(id: string): void {
    if (this.buffer.has(id)) this.cancelHints.add(id);
  }

  /** Whether a cancel was hinted for `id` (forgotten now: it is starting). */
  takeCancelHint(id: string): boolean {
    return this.cancelHints.delete(id);
  }

  /** At stop, once the claim loop has ended: everything still in the buffer goes back unstarted. */
  returnBuffered(): Promise<void> {
    return this.returns.release(this.buffer.drain(), 'shutdown');
  }

  /** At stop, after the drain: reserved items that came while stopping have gone back. */
  async lateReturnsSettled(): Promise<void> {
    await this.returns.settled();
  }
}
