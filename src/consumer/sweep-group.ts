import type { Ledger } from '../ledger/ledger.js';
import type { SweepSignal } from '../ledger/types.js';

/** A consumer as the shared sweep sees it. */
export interface SweepMember {
  readonly queue: string;
  /**
   * Its share of a sweep: `signal` says what the ledger holds for its queue
   * (undefined when the signals could not be read: sweep as if everything
   * were there).
   */
  sweep(signal: SweepSignal | undefined): Promise<void>;
}

/**
 * One backstop sweep for every consumer of a process that shares a ledger
 * and a sweep interval: each interval, one statement asks the ledger which
 * of their queues have claimable heads, expired leases or due probes
 * (Ledger.sweepSignals), and only those consumers claim or maintain. A
 * worker serving hundreds of idle queues sweeps them with one round trip per
 * interval instead of a claim and a maintenance pass per queue.
 */
export class SweepGroup {
  private readonly members = new Set<SweepMember>();
  private timer: NodeJS.Timeout | undefined;
  private ticking = false;

  constructor(
    private readonly ledger: Pick<Ledger, 'sweepSignals'>,
    readonly intervalMs: number,
  ) {}

  join(member: SweepMember): void {
    this.members.add(member);
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
  }

  leave(member: SweepMember): void {
    this.members.delete(member);
    if (this.members.size > 0 || this.timer === undefined) return;
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One sweep of every member now (the timer's; exported for tests). */
  async tick(): Promise<void> {
    if (this.ticking || this.members.size === 0) return;
    this.ticking = true;
    try {
      const members = [...this.members];
      const queues = [...new Set(members.map((m) => m.queue))];
      const signals = await this.ledger.sweepSignals(queues).then(
        (list) => new Map(list.map((s) => [s.queue, s])),
        () => undefined,
      );
      await Promise.allSettled(members.map((m) => m.sweep(signals?.get(m.queue))));
    } finally {
      this.ticking = false;
    }
  }
}

const groups = new WeakMap<object, Map<number, SweepGroup>>();

/** The shared sweep of consumers on `ledger` sweeping every `intervalMs`, made on first use. */
export function sweepGroupOf(ledger: Pick<Ledger, 'sweepSignals'>, intervalMs: number): SweepGroup {
  let byInterval = groups.get(ledger);
  if (!byInterval) groups.set(ledger, (byInterval = new Map()));
  let group = byInterval.get(intervalMs);
  if (!group) byInterval.set(intervalMs, (group = new SweepGroup(ledger, intervalMs)));
  return group;
}
