import type { EventEmitter } from 'node:events';
import type { Logger } from '../log.js';
import type { WakeReader } from '../wake/wake-reader.js';
import type { CoalesceClaim } from './coalescing.js';
import type { ConsumerCounters, ConsumerEvents } from './counters.js';
import type { FollowUps } from './follow-ups.js';
import type { JobRunDeps } from './job-run.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { OfferDesk } from './offer-desk.js';
import type { ConsumerSettings } from './options.js';
import type { QueueFlags } from './queue-flags.js';
import type { StaleGate } from './stale-gate.js';

/** The parts of its consumer the claim scheduler works with. */
export interface SchedulerParts<DB> {
  readonly ledger: ConsumerLedger;
  readonly settings: ConsumerSettings;
  readonly name: string;
  readonly counters: ConsumerCounters;
  readonly log: Logger;
  /** The queue's flags, the one home of pause and fairness: read, never copied. */
  readonly flags: Pick<QueueFlags, 'paused' | 'fair'>;
  /** Whether the next claim round takes only rescued work; told how long each claim statement took. */
  readonly gate: Pick<StaleGate, 'reason' | 'noteClaimMs'>;
  /** Where its events go (the consumer). */
  readonly events: Pick<EventEmitter<ConsumerEvents>, 'emit'>;
  /** Everything a job's run needs but the slot bookkeeping (the scheduler adds that). */
  readonly run: Omit<JobRunDeps<DB>, 'onSettled'>;
  /** What claim rounds coalesce (docs/design/batches-and-steps.md, Coalescing). */
  readonly coalesce: CoalesceClaim | undefined;
}

/** The consumer's wake side (with a wake channel, once started): whom the claim side tells what. */
export interface SchedulerWakeSide {
  /** Wake entries a claim round acted on are acknowledged; freed room lets it read again. */
  readonly reader: Pick<WakeReader, 'ack' | 'notify'>;
  /** Freed room: the desk may stand an offer. */
  readonly offers: Pick<OfferDesk, 'look'> | undefined;
  /** Saturated with work left over: a wake-up passed on so an idle replica joins in. */
  readonly followUps: Pick<FollowUps, 'send'>;
}
