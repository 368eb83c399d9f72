import { hostname } from 'node:os';
import { Gauge, type Registry } from 'prom-client';
import { newLeaseToken } from '../ledger/ids.js';
import type { Ledger } from '../ledger/ledger.js';

/** The part of the Ledger the fleet-wide gauges read. */
export type FleetGaugeLedger = Pick<Ledger, 'fleetGauges' | 'releaseFleetGauges'>;

export interface FleetGaugeRefresh {
  /** How old the fleet's count may get before it is counted again (the reconcile interval). */
  everyMs: number;
  /** How long the exporter's lease lasts from each refresh; default three `everyMs`, at least 15 s. */
  leaseMs?: number;
}

/** The lease when none is given: outlives two missed passes, and a stopped worker's is taken over within it. */
export function defaultFleetLeaseMs(everyMs: number): number {
  return Math.max(3 * everyMs, 15_000);
}

/**
 * The ledger-wide gauges (items by queue and state and whether each is exact, oldest due age, due
 * later, paused), exported by one process of the fleet at a time
 * (docs/design/supervisor.md, Gauges, once per fleet): the one holding the
 * `gauges` lease in the ledger's fleet tasks. Every other process exports
 * no series of them, so a stock query needs no de-duplication; across a
 * hand-over `max by (queue, state)` joins the two exporters' series.
 *
 * The holder considers its lease over at the local time it would end if
 * the ledger had granted it when the refresh began (never later than the
 * ledger's), and from then on exports nothing until a refresh renews it:
 * a holder whose passes stall stops exporting before another takes over.
 */
export class FleetGauges {
  /** This process's name in the lease: diagnostic host and pid, then a random token. */
  readonly holder = `${hostname().slice(0, 64)}:${process.pid}:${newLeaseToken()}`;

  private readonly items: Gauge<'queue' | 'state'>;
  private readonly itemsAtLeast: Gauge<'queue' | 'state'>;
  private readonly oldestDueAge: Gauge<'queue'>;
  private readonly scheduled: Gauge<'queue'>;
  private readonly paused: Gauge<'queue'>;
  private heldUntilMs = 0;

  constructor(registers: Registry[]) {
    const dropWhenNotHeld = (gauge: () => Gauge<'queue'> | Gauge<'queue' | 'state'>) => () => {
      if (!this.holding) gauge().reset();
    };
    this.items = new Gauge({
      name: 'lanewake_items',
      help:
        'Items in the ledger by queue and state (counted up to a cap: docs/operations.md). ' +
        'Fleet-wide: exported only by the process holding the gauges lease.',
      labelNames: ['queue', 'state'] as const,
      registers,
      collect: dropWhenNotHeld(() => this.items),
    });
    this.itemsAtLeast = new Gauge({
      name: 'lanewake_items_at_least',
      help:
        '1 when lanewake_items of the queue and state stopped at its cap (there are that many or more), ' +
        '0 when it is exact. Fleet-wide: exported only by the process holding the gauges lease.',
      labelNames: ['queue', 'state'] as const,
      registers,
      collect: dropWhenNotHeld(() => this.itemsAtLeast),
    });
    this.oldestDueAge = new Gauge({
      name: 'lanewake_oldest_due_age_seconds',
      help:
        'Age of the oldest due lane head waiting to be claimed, in seconds (0 when none ' +
        'waits). Fleet-wide: exported only by the process holding the gauges lease.',
      labelNames: ['queue'] as const,
      registers,
      collect: dropWhenNotHeld(() => this.oldestDueAge),
    });
    this.scheduled = new Gauge({
      name: 'lanewake_items_scheduled',
      help:
        'Of the pending items, those not due yet (a requested delay or a retry backoff), counted up ' +
        'to the pending cap. Fleet-wide: exported only by the process holding the gauges lease.',
      labelNames: ['queue'] as const,
      registers,
      collect: dropWhenNotHeld(() => this.scheduled),
    });
    this.paused = new Gauge({
      name: 'lanewake_queue_paused',
      help:
        '1 while the ledger holds the queue paused (lanewake pause), else 0. ' +
        'Fleet-wide: exported only by the process holding the gauges lease.',
      labelNames: ['queue'] as const,
      registers,
      collect: dropWhenNotHeld(() => this.paused),
    });
    const exporter: Gauge = new Gauge({
      name: 'lanewake_fleet_gauges_exporter',
      help: '1 while this process holds the gauges lease and exports the fleet-wide gauges, else 0. Per process.',
      registers,
      collect: () => exporter.set(this.holding ? 1 : 0),
    });
  }

  /** This process exports the fleet-wide gauges now. */
  get holding(): boolean {
    return Date.now() < this.heldUntilMs;
  }

  /**
   * Takes or keeps the lease and, holding it, replaces the gauges with the
   * fleet's last count; not holding it, drops them. Returns whether this
   * process exports them. Throws what the ledger throws: the gauges then
   * stay as they were until the lease runs out here.
   */
  async refresh(ledger: FleetGaugeLedger, opts: FleetGaugeRefresh): Promise<boolean> {
    const leaseMs = opts.leaseMs ?? defaultFleetLeaseMs(opts.everyMs);
    const askedAtMs = Date.now();
    const reading = await ledger.fleetGauges({ holder: this.holder, everyMs: opts.everyMs, leaseMs });
    // No await between the resets and the sets: a scrape never sees them half-written.
    for (const g of [this.items, this.itemsAtLeast, this.oldestDueAge, this.scheduled, this.paused]) g.reset();
    if (reading === undefined) {
      this.heldUntilMs = 0;
      return false;
    }
    this.heldUntilMs = askedAtMs + leaseMs;
    const paused = new Set(reading.paused);
    for (const s of reading.stats) {
      for (const [state, n] of Object.entries(s.counts)) {
        this.items.set({ queue: s.queue, state }, n.count);
        this.itemsAtLeast.set({ queue: s.queue, state }, n.atLeast ? 1 : 0);
      }
      this.oldestDueAge.set({ queue: s.queue }, s.oldestDueAgeMs / 1000);
      this.scheduled.set({ queue: s.queue }, s.scheduled.count);
      this.paused.set({ queue: s.queue }, paused.has(s.queue) ? 1 : 0);
    }
    for (const queue of paused) this.paused.set({ queue }, 1);
    return true;
  }

  /** Stops exporting and gives the lease up, so another process takes it at its next pass. */
  async release(ledger: FleetGaugeLedger): Promise<void> {
    this.heldUntilMs = 0;
    await ledger.releaseFleetGauges(this.holder);
  }
}
