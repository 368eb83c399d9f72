import { performance } from 'node:perf_hooks';
import { MAX_CLAIM_ITEMS } from '../ledger/ledger.js';
import { claimRoundChannel, type ClaimRoundMessage } from '../diagnostics.js';
import type { ClaimedItem } from '../ledger/types.js';
import { Latch } from '../latch.js';
import type { WakeEntry, WakeMessage } from '../wake/messages.js';
import { runJob, type JobRunDeps, type Outcome, type RunningJob } from './job-run.js';
import {
  assertCount,
  ClaimHolds,
  ClaimStateError,
  nextMode,
  type ClaimMode,
  type HeadsKnown,
  type LastRound,
} from './claim-modes.js';
import { arrivals, Intake, type Arrival, type IntakeSource } from './intake.js';
import { RoundClaims } from './round-claims.js';
import type { SchedulerParts, SchedulerWakeSide } from './scheduler-parts.js';

export type { SchedulerParts, SchedulerWakeSide } from './scheduler-parts.js';

/** Claim rounds one scheduler may have in flight at once. */
const MAX_CLAIM_ROUNDS = 2;
/** Ids named by wake-ups that wait for a claim round with room (see claimRound). */
const MAX_WAITING_IDS = 1000;
const CAPPED_RETRY_MS = 250;
const CLAIM_ERROR_BACKOFF_MS = 500;
/** A signal that came after a round's head search is followed up this much later. */
const LOOK_AGAIN_MS = 5;
/** The loop's wait when nothing is buffered: any signal wakes it sooner (the sweeper's among them). */
const IDLE_WAIT_MS = 60_000;

/**
 * The consumer's claim side and its executor slots (docs/design/consumer.md): claim
 * rounds sized to the claim room, items named by wake-ups first, a look for
 * other heads when something says there may be some, and the start of each
 * item the intake holds in a slot, however it was claimed. The two share the
 * hot path's counts (capacity.ts), so they live together.
 */
export class ClaimScheduler<DB> {
  /** Items whose handler is running: each holds an executor slot. */
  readonly running = new Map<string, RunningJob>();
  /** Items whose handler has settled and whose outcome is being written. */
  readonly finishing = new Map<string, RunningJob>();
  /** Where every claimed item enters, whatever its source, and waits for a slot. */
  readonly intake: Intake;
  private mode: ClaimMode = 'new';
  private readonly wake = new Latch();
  /** Ids named by wake-ups, to claim by id, in the order they came, with who named them. */
  private targeted = new Map<string, IntakeSource>();
  private pendingAcks: WakeEntry[] = [];
  private readonly runDeps: JobRunDeps<DB>;
  private heads: HeadsKnown = 'maybe';
  /** Bumped by every noteWork(): a claim round must not forget a signal its head search did not see. */
  private workSignals = 0;
  private lookTimer: NodeJS.Timeout | undefined;
  /** Rounds in flight that may search for heads beyond the ids they were named (see caughtUp). */
  private searching = 0;
  private lastRound: LastRound = 'short';
  /** Error backoff and the fleet cap: no round before their time. */
  private readonly holds = new ClaimHolds();
  private readonly claims: RoundClaims;

  /** Its wake side, with a wake channel, once the consumer started. */
  private wakeSide: SchedulerWakeSide | undefined;

  constructor(private readonly parts: SchedulerParts<DB>) {
    const { ledger, settings, name, counters, log } = parts;
    this.claims = new RoundClaims(ledger, settings, name, parts.coalesce);
    this.intake = new Intake(settings, ledger, counters, log, {
      running: this.running,
      claiming: () => this.mode === 'claiming',
      paused: () => this.parts.flags.paused,
      start: (item, claimedAtMs) => this.startJob(item, claimedAtMs),
      returned: () => this.noteWork(),
      followUp: () => this.followUp(),
    });
    this.runDeps = {
      ...parts.run,
      // The slot frees when the handler settles, so the next claim overlaps this finish.
      onSettled: (run) => {
        if (run.handlerMs !== undefined) this.intake.buffer.noteHandlerMs(run.handlerMs);
        if (this.running.delete(run.item.id)) this.finishing.set(run.item.id, run);
        this.intake.startBuffered();
        this.notify();
      },
    };
  }

  /** The consumer's wake reader, offers and follow-ups, once it reads wake-ups. */
  connect(wakeSide: SchedulerWakeSide): void {
    this.wakeSide = wakeSide;
  }

  /** Claims may run (the consumer started). */
  start(): void {
    this.mode = nextMode(this.mode, 'claiming');
  }

  /** No more claims, and reserved items from now on go back (the consumer is stopping). */
  stopClaiming(): void {
    this.mode = nextMode(this.mode, 'stopping');
    this.notify();
  }

  /** The queue's paused flag changed: a pause returns what waits unstarted (running items go on); a resume claims. */
  pauseChanged(paused: boolean): void {
    if (paused) this.intake.startBuffered();
    else this.kick();
  }

  /** Wakes the loop (and the wake reader: room may have changed). */
  notify(): void {
    this.wake.notify();
    this.wakeSide?.reader.notify();
    this.wakeSide?.offers?.look();
  }

  /** Claimable heads may exist beyond any named ids: the next claim round looks. */
  noteWork(): void {
    this.heads = 'maybe';
    this.workSignals++;
  }

  takeEntries(entries: readonly WakeEntry[]): void {
    if (entries.length === 0) return;
    this.parts.counters.wakeEntriesRead += entries.length;
    for (const e of entries) this.takeWake(e, 'round');
    this.pendingAcks.push(...entries);
    this.wake.notify();
  }

  /** Claim now. */
  kick(): void {
    this.noteWork();
    this.wake.notify();
  }

  /** `source`: `wake` for a wake-up a producer in this process passed on, `round` for one read or a message. */
  takeWake(m: Pick<WakeMessage, 'ids' | 'more'>, source: 'round' | 'wake'): void {
    // A fair queue's items are claimed by their rounds (docs/design/keys.md, "Fair queues"): claimed by name, in the
    // order their wake-ups came, one key's flood would run ahead of the keys announced after it.
    if (this.parts.flags.fair) {
      this.noteWork();
      return;
    }
    for (const id of m.ids) if (!this.targeted.has(id)) this.targeted.set(id, source);
    // A wake-up that names its items is answered by claiming those; one that names none (or not all) means "look".
    if (m.ids.length === 0 || m.more === true) this.noteWork();
  }

  /**
   * A cancel was requested for `id`: if it runs here, its run asks the ledger
   * now (the message is a hint; the ledger's flag decides). One waiting in the
   * buffer asks as it starts.
   */
  takeCancel(id: string): void {
    const run = this.running.get(id);
    if (run) run.checkLedger();
    else this.intake.hintCancel(id);
  }

  /**
   * Nothing left to claim as far as it knows: no buffered items, no search for heads
   * in flight or wanted (rounds that only claim named ids do not count: those are
   * being taken), and its last look found no more heads. A consumer working through
   * a backlog makes no offers (docs/design/consumer.md).
   */
  caughtUp(): boolean {
    return (
      this.intake.buffer.size === 0 &&
      this.searching === 0 &&
      this.intake.capacity.heldRoom === 0 &&
      this.heads === 'none' &&
      this.lastRound === 'short'
    );
  }

  /** Room a reservation held was given back: buffered items may start in freed slots, and claims may use it. */
  roomReturned(): void {
    this.intake.startBuffered();
    this.notify();
  }

  /**
   * Claims run as rounds of a few statements each, most of the time waiting
   * on the ledger's commit. While the last round came back full (more work
   * than room), a second round may start before the first returns, each on
   * its own connection with its own share of the room, so the commit waits
   * overlap instead of adding up.
   */
  async loop(): Promise<void> {
    const rounds = new Set<Promise<void>>();
    const { buffer, capacity } = this.intake;
    while (this.mode === 'claiming') {
      this.intake.startBuffered();
      const room = Math.min(MAX_CLAIM_ITEMS, capacity.claimRoom());
      // A claim round costs about the same wait whatever its size: while the buffer
      // still holds work for the slots, let the room grow to half the buffer first.
      const worthARound = buffer.size === 0 || room >= Math.ceil(capacity.prefetchTarget() / 2);
      // Rounds overlap while claims come back full, and for named ids (a wake-up
      // for new work must not wait behind a round looking for other heads).
      const maxRounds =
        this.parts.settings.maxProcessing === undefined && (this.lastRound === 'full' || this.targeted.size > 0)
          ? MAX_CLAIM_ROUNDS
          : 1;
      const holdUntil = this.holds.until();
      const backingOff = Date.now() < holdUntil;
      if (
        !this.parts.flags.paused &&
        !backingOff &&
        room > 0 &&
        worthARound &&
        rounds.size < maxRounds &&
        (this.heads === 'maybe' || this.targeted.size > 0)
      ) {
        capacity.roundStarted(room);
        // The round searches for heads when it may have work beyond named ids
        // (claimRound's lookFurther, read now, before its first await).
        const search = this.heads === 'maybe' || this.targeted.size > room + MAX_WAITING_IDS;
        if (search) this.searching++;
        const round: Promise<void> = this.claimRound(room)
          .catch((error: unknown) => {
            this.parts.counters.errors++;
            this.lastRound = 'short';
            this.holds.afterError(Date.now(), CLAIM_ERROR_BACKOFF_MS);
            this.parts.log.error({ err: (error as Error).message }, 'claim failed; retrying');
          })
          .finally(() => {
            capacity.roundEnded(room);
            if (search) this.searching = assertCount('searching rounds', this.searching - 1);
            rounds.delete(round);
            this.wake.notify();
          });
        rounds.add(round);
        continue;
      }
      // Buffered items are looked at often enough to go back before a third of their lease has passed.
      const until = buffer.size > 0 ? this.parts.settings.leaseMs / 6 : IDLE_WAIT_MS;
      await this.wake.wait(Math.max(1, backingOff ? Math.min(until, holdUntil - Date.now()) : until));
    }
    clearTimeout(this.lookTimer);
    await Promise.allSettled([...rounds]);
  }

  private lookSoon(): void {
    if (this.lookTimer !== undefined) return;
    this.lookTimer = setTimeout(() => {
      this.lookTimer = undefined;
      if (this.mode !== 'claiming') return;
      this.noteWork();
      this.wake.notify();
    }, LOOK_AGAIN_MS);
    this.lookTimer.unref();
  }

  private async claimRound(free: number): Promise<void> {
    this.parts.counters.claimRounds++;
    /** Signals up to here are answered by this round's head search, if it makes one. */
    let seenSignals = this.workSignals;
    const startedAt = performance.now();
    const acks = this.pendingAcks;
    this.pendingAcks = [];
    const named = [...this.targeted];
    const sourceOf = new Map(named.slice(0, free));
    const ids = [...sourceOf.keys()];
    // Named items beyond this round's room wait for the next round, oldest first (dropped as hints, they
    // starved while new wake-ups filled a small room: docs/design/consumer.md).
    // Past MAX_WAITING_IDS a head search finds them.
    this.targeted = new Map(named.slice(free, free + MAX_WAITING_IDS));
    const lookFurther = this.heads === 'maybe' || named.length > free + MAX_WAITING_IDS;
    const requeue = (id: string) => {
      if (!this.targeted.has(id)) this.targeted.set(id, sourceOf.get(id) ?? 'round');
    };
    if (this.parts.settings.maxProcessing !== undefined) {
      const capRoom = await this.claims.capRoom(this.parts.settings.maxProcessing);
      if (capRoom <= 0) {
        for (const id of ids) requeue(id);
        this.pendingAcks.unshift(...acks);
        this.noteWork();
        // Try again shortly, or as soon as one of ours finishes (finished() lifts this).
        this.holds.capped(Date.now(), CAPPED_RETRY_MS);
        return;
      }
      free = Math.min(free, capRoom);
      for (const id of ids.splice(free)) requeue(id);
    }
    // Each call's items are stamped with its own start: their leases run from about then.
    const byIdsAtMs = Date.now();
    const staleOnly = this.parts.gate.reason() !== undefined;
    if (staleOnly) this.parts.counters.staleOnlyRounds++;
    const claimed = await this.claims.byIds(ids, staleOnly);
    if (ids.length > 0) this.noteClaimMs(byIdsAtMs);
    // Named by a wake-up: start them now, before looking for other heads.
    this.intake.take(
      claimed.map((item): Arrival => ({ item, claimedAtMs: byIdsAtMs, source: sourceOf.get(item.id) ?? 'round' })),
    );
    let more = false;
    if (claimed.length < free && lookFurther) {
      const want = free - claimed.length;
      seenSignals = this.workSignals;
      const claimAtMs = Date.now();
      const r = await this.claims.heads(want, staleOnly);
      this.noteClaimMs(claimAtMs);
      // While stopping these wait in the buffer, and stop() returns them.
      this.intake.take(arrivals(r.items, claimAtMs, 'head-search'));
      claimed.push(...r.items);
      more = r.moreAvailable || r.items.length >= want;
    } else {
      // Only named ids were claimed: more work is likely only if something already said so.
      more = lookFurther && claimed.length >= free;
    }
    this.heads = more ? 'maybe' : 'none';
    // A lane advanced (or a wake-up or sweep came) after the head search read: look again
    // shortly. Not at once: under load the next finish says so anyway, and a round per
    // signal would make many small claims; idle, this keeps a lane from waiting for the sweep.
    if (!more && this.workSignals !== seenSignals) this.lookSoon();
    this.lastRound = claimed.length >= free ? 'full' : 'short';
    const durationMs = performance.now() - startedAt;
    this.parts.events.emit('claimRound', { claimed: claimed.length, durationMs, targeted: ids.length });
    if (claimRoundChannel.hasSubscribers) {
      const endedAtMs = Date.now();
      const message: ClaimRoundMessage = {
        queue: this.parts.settings.queue,
        consumer: this.parts.name,
        startedAtMs: endedAtMs - durationMs,
        endedAtMs,
        targeted: ids.length,
        claimed: claimed.map((c) => c.id),
      };
      claimRoundChannel.publish(message);
    }
    if (acks.length > 0) void this.wakeSide?.reader.ack(acks);
    if (more && this.intake.capacity.freeSlots() === 0) await this.followUp();
  }

  private async followUp(): Promise<void> {
    await this.wakeSide?.followUps.send();
  }

  private noteClaimMs(sentAtMs: number): void {
    const now = Date.now();
    this.parts.gate.noteClaimMs(now - sentAtMs);
    if (this.intake.buffer.noteClaimMs(now - sentAtMs, now)) {
      this.parts.log.warn(
        { claimMs: now - sentAtMs, leaseMs: this.parts.settings.leaseMs },
        'a claim took a third of the lease or more: prefetch is off, ' +
          'and items claimed past two thirds of it go back unstarted; raise leaseMs',
      );
    }
  }

  private startJob(item: ClaimedItem, claimedAtMs: number): void {
    if (this.mode !== 'claiming') throw new ClaimStateError(`claim scheduler: a start while ${this.mode}`);
    const run = runJob(this.runDeps, item, claimedAtMs);
    this.running.set(item.id, run);
    run.start();
    if (this.intake.takeCancelHint(item.id)) run.checkLedger();
    if (item.group !== undefined) this.parts.counters.coalesced += item.group.ids.length;
    this.parts.events.emit('started', item);
    void run.done.then(
      (outcome) => this.finished(item, outcome, run.handlerMs, run.laneAdvanced, run.keyAdmitted),
      (error: unknown) => {
        this.parts.counters.errors++;
        this.parts.log.error({ id: item.id, err: (error as Error).message }, 'executor failed');
        this.finished(item, 'leaseLost', run.handlerMs);
      },
    );
  }

  private finished(
    item: ClaimedItem,
    outcome: Outcome,
    handlerMs: number | undefined,
    laneAdvanced?: boolean,
    keyAdmitted?: boolean,
  ): void {
    this.running.delete(item.id);
    this.finishing.delete(item.id);
    this.parts.counters[outcome]++;
    this.holds.itemFinished();
    // The slot is free; a finished lane head has a successor worth claiming right here (lane affinity),
    // unless the completion said the lane has none waiting.
    // A released item may be due again at once (a block whose key was woken while it ran). A keyed
    // item's end may have admitted its key's next waiting item, which no wake-up announces, unless
    // the completion said it claimed all it admitted (key affinity) or admitted none.
    if (
      (item.lane !== null && laneAdvanced !== false) ||
      (item.concurrencyKey !== null && keyAdmitted !== false) ||
      // A workflow's job may have made its dependents claimable, which no wake-up announces.
      item.workflowId !== undefined ||
      outcome === 'released'
    )
      this.noteWork();
    this.parts.events.emit('outcome', item, outcome, handlerMs);
    this.notify();
  }
}
