/** Eligibility: which of a consumer's types may come to it outside its claim rounds, and when. */
import type { CoalesceClaim } from './coalescing.js';
import type { ConsumerSettings } from './options.js';
import type { QueueFlags } from './queue-flags.js';
import type { StaleGate } from './stale-gate.js';

/** A consumer with handlers for more types than this makes no offers (each offer lists them). */
const MAX_OFFER_TYPES = 32;

/**
 * What a consumer may take outside its claim rounds (at insert, under an
 * offer, with a completion). A coalescing type's heads are taken only by
 * claim rounds, which gather their groups.
 */
export class Eligibility {
  /** The types reservations claim, when it claims only some (undefined: any type). */
  readonly reservedTypes: readonly string[] | undefined;
  private readonly coalescing: Readonly<Record<string, unknown>>;
  /** The consumer runs: from its start until it begins stopping. */
  private running = false;

  constructor(
    private readonly settings: Pick<ConsumerSettings, 'types' | 'maxProcessing' | 'epoch'>,
    private readonly handlers: ReadonlyMap<string, unknown>,
    coalesce: CoalesceClaim | undefined,
    private readonly flags: Pick<QueueFlags, 'paused'>,
    private readonly gate: Pick<StaleGate, 'reason'>,
  ) {
    this.coalescing = coalesce?.types ?? {};
    this.reservedTypes =
      coalesce === undefined ? settings.types : this.claimedTypes().filter((t) => !(t in this.coalescing));
  }

  /** Whether it has handlers for all these types, and takes them outside claim rounds. */
  handles(wanted: Iterable<string>): boolean {
    const types = this.reservedTypes;
    for (const t of wanted)
      if (!this.handlers.has(t) || (types !== undefined && !types.includes(t)) || t in this.coalescing) return false;
    return true;
  }

  /** The types it may be handed at insert by an offer, or undefined: it makes no offers. */
  offerTypes(): readonly string[] | undefined {
    const types = this.claimedTypes().filter((t) => !(t in this.coalescing));
    return types.length > 0 && types.length <= MAX_OFFER_TYPES ? types : undefined;
  }

  /** The consumer started (`true`) or began stopping (`false`). */
  setRunning(running: boolean): void {
    this.running = running;
  }

  /**
   * Items claimed outside claim rounds are only for a running, unpaused
   * consumer whose claims are not fenced in SQL (fleet-wide cap, ownership
   * epoch) and that claims as usual (not stale-only).
   */
  takesOutsideRounds(): boolean {
    return (
      this.running &&
      !this.flags.paused &&
      this.settings.maxProcessing === undefined &&
      this.settings.epoch === undefined &&
      this.gate.reason() === undefined
    );
  }

  /** The types it has handlers for and claims. */
  private claimedTypes(): string[] {
    return [...this.handlers.keys()].filter(
      (t) => this.settings.types === undefined || this.settings.types.includes(t),
    );
  }
}
