import type { EventEmitter } from 'node:events';
import { wakeReadChannel, type WakeReadMessage } from '../diagnostics.js';
import type { ClaimedItem } from '../ledger/types.js';
import type { ControlMessage, WakeEntry } from '../wake/messages.js';
import type { Outcome } from './job-run.js';

/** One count per outcome (named as the outcome is), then what the claim side did. */
export interface ConsumerCounters extends Record<Outcome, number> {
  claimed: number;
  claimRounds: number;
  sweeps: number;
  wakeEntriesRead: number;
  /** Wake-ups a producer in this process passed directly (no Redis round trip). */
  localWakes: number;
  /** Items a producer in this process inserted already claimed for this consumer (no claim round trip). */
  claimedAtInsert: number;
  /** Offers this consumer posted for producers in any process (docs/design/handover.md, "Through an offer"). */
  offersMade: number;
  /** Items producers inserted claimed under its offers and handed off (no claim round trip). */
  handedOver: number;
  /** Of those, items found in the ledger by the offer's token because the handoff never came. */
  handoffsRecovered: number;
  /** Lane successors claimed in the transaction that completed their predecessors (lane affinity, no claim round). */
  claimedWithCompletion: number;
  followUpWakes: number;
  /** Items returned unstarted (returns.ts): their wait in the buffer ran too long, or the consumer stopped. */
  prefetchReleased: number;
  /** Durable steps run and recorded (ctx.step), and steps found done by an earlier attempt and not run again. */
  stepsRecorded: number;
  stepsResumed: number;
  /** Items that ran in a coalesced group behind its head (the head not counted). */
  coalesced: number;
  /** ctx.progress reports written to the ledger. */
  progressWrites: number;
  /** Claim rounds that took only rescued work (docs/design/consumer.md, "Stale-only claims"). */
  staleOnlyRounds: number;
  errors: number;
}

export function newConsumerCounters(): ConsumerCounters {
  return {
    claimed: 0,
    completed: 0,
    retried: 0,
    dead: 0,
    released: 0,
    blocked: 0,
    cancelled: 0,
    skipped: 0,
    leaseLost: 0,
    abandoned: 0,
    claimRounds: 0,
    sweeps: 0,
    wakeEntriesRead: 0,
    localWakes: 0,
    claimedAtInsert: 0,
    offersMade: 0,
    handedOver: 0,
    handoffsRecovered: 0,
    claimedWithCompletion: 0,
    followUpWakes: 0,
    prefetchReleased: 0,
    stepsRecorded: 0,
    stepsResumed: 0,
    progressWrites: 0,
    coalesced: 0,
    staleOnlyRounds: 0,
    errors: 0,
  };
}

export interface ConsumerEvents {
  /**
   * An item's run ended and its outcome is written; `handlerMs`: how long its handler ran, undefined if it never ran.
   */
  outcome: [item: ClaimedItem, outcome: Outcome, handlerMs: number | undefined];
  started: [item: ClaimedItem];
  /** A handler's ctx.stage ended (its fn returned or threw): the stage's name and how long it ran, in ms. */
  stage: [item: ClaimedItem, stage: string, durationMs: number];
  control: [message: ControlMessage];
  /** Wake entries read from Redis, as they reach the claim side: the item ids they name (none for a "look" wake-up). */
  wakeRead: [read: { ids: readonly string[]; entries: number }];
  /** One claim round: how many items it won and how long its ledger round trips took. */
  claimRound: [round: { claimed: number; durationMs: number; targeted: number }];
}

/** Wake entries read from Redis, as they reach the claim side: the `wakeRead` event and the diagnostics channel. */
export function announceWakeRead(
  events: EventEmitter<ConsumerEvents>,
  queue: string,
  consumer: string,
  entries: readonly WakeEntry[],
): void {
  if (events.listenerCount('wakeRead') > 0)
    events.emit('wakeRead', { ids: entries.flatMap((e) => e.ids), entries: entries.length });
  if (wakeReadChannel.hasSubscribers) {
    const message: WakeReadMessage = {
      queue,
      consumer,
      atMs: Date.now(),
      ids: entries.flatMap((e) => e.ids),
      entries: entries.length,
    };
    wakeReadChannel.publish(message);
  }
}
