import type { ConsumerRow } from '../ledger/sql/fleet/consumers.js';
import type { Logger } from '../log.js';
import { packageVersion } from '../version.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { ConsumerSettings } from './options.js';

/**
 * How often a process writes its consumers' heartbeat; a consumer counts as live for three beats (sql/consumers.ts).
 */
export const HEARTBEAT_MS = 5_000;

type RegistryLedger = Pick<ConsumerLedger, 'consumerBeat' | 'consumerGone'>;

/** Why the consumer claims only rescued work now (stale-gate.ts), read at each beat; undefined: as usual. */
type StaleOnlyNow = () => string | undefined;

/**
 * A consumer's row in the ledger's registry of live consumers
 * (docs/design/supervisor.md, "Live consumers"): written at start, kept fresh by its
 * process's heartbeat, removed at stop. What the fleet serves is read from it
 * by explain and stats; nothing claims by it, so a failed beat is only
 * logged and the next one tries again. Each beat also says whether the
 * consumer claims only rescued work, and why (explain names it).
 */
export class ConsumerRegistration {
  constructor(
    private readonly ledger: RegistryLedger,
    private readonly row: ConsumerRow,
    private readonly log: Logger,
    private readonly staleOnly?: StaleOnlyNow,
  ) {}

  /** The registration of consumer `name` with these settings. */
  static of(
    ledger: RegistryLedger,
    name: string,
    s: ConsumerSettings,
    log: Logger,
    staleOnly?: StaleOnlyNow,
  ): ConsumerRegistration {
    const row: ConsumerRow = {
      name,
      queue: s.queue,
      classes: s.classes,
      types: s.types ?? null,
      concurrency: s.concurrency,
      maxProcessing: s.maxProcessing ?? null,
      epoch: s.epoch ?? null,
      version: packageVersion(),
    };
    return new ConsumerRegistration(ledger, row, log, staleOnly);
  }

  start(): Promise<void> {
    return heartbeatOf(this.ledger, this.log).add(this.row, this.staleOnly);
  }

  stop(): Promise<void> {
    return heartbeatOf(this.ledger, this.log).remove(this.row.name);
  }
}

/**
 * One heartbeat per ledger object, so a process with many consumers sends one statement per beat, not one per consumer.
 */
const heartbeats = new WeakMap<RegistryLedger, Heartbeat>();

function heartbeatOf(ledger: RegistryLedger, log: Logger): Heartbeat {
  let h = heartbeats.get(ledger);
  if (h === undefined) {
    h = new Heartbeat(ledger, log);
    heartbeats.set(ledger, h);
  }
  return h;
}

class Heartbeat {
  private readonly rows = new Map<string, { row: ConsumerRow; staleOnly: StaleOnlyNow | undefined }>();
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;

  constructor(
    private readonly ledger: RegistryLedger,
    private readonly log: Logger,
  ) {}

  /** The consumer's row written at once (it is live from its start), then with the others on each beat. */
  async add(row: ConsumerRow, staleOnly?: StaleOnlyNow): Promise<void> {
    const entry = { row, staleOnly };
    this.rows.set(row.name, entry);
    await this.ledger.consumerBeat([rowNow(entry)], true).catch((error: unknown) => this.failed(error));
    if (this.timer === undefined) {
      this.timer = setInterval(() => void this.beat(), HEARTBEAT_MS);
      this.timer.unref();
    }
  }

  async remove(name: string): Promise<void> {
    this.rows.delete(name);
    if (this.rows.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
    await this.beating;
    await this.ledger
      .consumerGone(name)
      .catch((error: unknown) =>
        this.log.debug({ err: error }, 'consumer registry: removing the row failed; it ages out'),
      );
  }

  private beat(): Promise<void> {
    // One at a time: a beat that outlasts the interval is not joined by the next.
    this.beating ??= this.ledger
      .consumerBeat([...this.rows.values()].map(rowNow), false)
      .catch((error: unknown) => this.failed(error))
      .finally(() => (this.beating = undefined));
    return this.beating;
  }

  private failed(error: unknown): void {
    this.log.warn({ err: error }, 'consumer registry: heartbeat failed');
  }
}

/** The row as of this beat: whether it claims only rescued work now. */
function rowNow(entry: { row: ConsumerRow; staleOnly: StaleOnlyNow | undefined }): ConsumerRow {
  return entry.staleOnly === undefined ? entry.row : { ...entry.row, staleOnly: entry.staleOnly() ?? null };
}
