import { performance } from 'node:perf_hooks';
import { MAX_CLAIM_ITEMS } from '../ledger/ledger.js';
import { claimRoundChannel, type ClaimRoundMessage } from '../diagnostics.js';
import type { ClaimedItem } from '../ledger/types.js';
import { Latch } from '../latch.js';
import type { Logger } from '../log.js';
import type { WakeEntry, WakeMessage } from '../wake/messages.js';
import type { ConsumerCounters } from './counters.js';
import { runJob, type JobRunDeps, type Outcome, type RunningJob } from './job-run.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { ConsumerSettings } from './options.js';
import { PrefetchBuffer } from './prefetch-buffer.js';
import { RoundClaims } from './round-claims.js';
import type { SchedulerHost } from './scheduler-host.js';
import { HandBack } from './hand-back.js';

export type { SchedulerHost } from './scheduler-host.js';

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
 * The consumer's claim side and its executor slots (docs/design.md §6): claim
 * rounds sized to the free slots plus the prefetch buffer, items named by
 * wake-ups first, a look for other heads when something says there may be
 * some, and the start of each claimed item in a slot, however it was
 * claimed. The two share the hot path's counts, so they live together.
 */
export class ClaimScheduler<DB> {
  /** Items whose handler is running: each holds an executor slot. */
  readonly running = new Map<string, RunningJob>();
  /** Items whose handler has settled and whose outcome is being written. */
  readonly finalizing = new Map<string, RunningJob>();
  readonly buffer: PrefetchBuffer;
  /** Set while the consumer runs; cleared when it begins to stop. */
  private active = false;
  /** A pause control message holds new claims (running items go on). */
  private paused = false;
  private readonly wake = new Latch();
  private targeted = new Set<string>();
  /** Items in the prefetch buffer named by a cancel message: each asks the ledger as it starts. */
  private readonly cancelHints = new Set<string>();
  private pendingAcks: WakeEntry[] = [];
  private readonly handBack: HandBack;
  private readonly runDeps: JobRunDeps<DB>;
  private mightHaveWork = true;
  /** Bumped by every noteWork(): a claim round must not forget a signal its head search did not see. */
  private workSignals = 0;
  private lookTimer: NodeJS.Timeout | undefined;
  /** Room promised to claim rounds in flight. */
  private roundsRoom = 0;
  /** Rounds in flight that may search for heads beyond the ids they were named (see caughtUp). */
  private searching = 0;
  /** The last claim round got all the room it asked for: worth a second round in parallel. */
  private lastRoundFull = false;
  private claimBackoffUntil = 0;
  /** The claim limiter found the fleet at its cap: no claim before this, unless one of ours finishes. */
  private cappedUntil = 0;
  private readonly claims: RoundClaims;
  private readonly prefetchOff: boolean;

  constructor(
    ledger: ConsumerLedger,
    private readonly settings: ConsumerSettings,
    private readonly name: string,
    private readonly counters: ConsumerCounters,
    private readonly log: Logger,
    private readonly host: SchedulerHost<DB>,
  ) {
    // A fleet-wide cap counts prefetched items as processing: keep the cap tight, no prefetch.
    const limit = settings.maxProcessing !== undefined ? 0 : settings.prefetch;
    this.prefetchOff = limit === 0;
    this.buffer = new PrefetchBuffer({ concurrency: settings.concurrency, limit, leaseMs: settings.leaseMs });
    this.claims = new RoundClaims(ledger, settings, name, host.coalesce);
    this.handBack = new HandBack(ledger, counters, log, {
      leaving: (id) => this.cancelHints.delete(id),
      gone: () => this.noteWork(),
    });
    this.runDeps = {
      ...host.runDeps,
      // The slot frees when the handler settles, so the next claim overlaps this finalize.
      onSettled: (run) => {
        if (run.handlerMs !== undefined) this.buffer.noteHandlerMs(run.handlerMs);
        if (this.running.delete(run.item.id)) this.finalizing.set(run.item.id, run);
        this.startPrefetched();
        this.notify();
      },
    };
  }

  /** Executor slots with no handler running, less those held for items arriving claimed. */
  freeSlots(): number {
    return this.settings.concurrency - this.running.size - this.host.held.heldSlots;
  }

  /**
   * How many items a claim may take now: the free slots plus the room left
   * in the prefetch buffer, less what claim rounds in flight and held
   * handovers have.
   */
  claimRoom(): number {
    return this.freeSlots() + this.buffer.target() - this.buffer.size - this.roundsRoom - this.host.held.heldRoom;
  }

  /**
   * How many items keyed ends admit a completion may claim with it: the
   * claim room, plus, within the prefetch buffer's target, the room claim
   * rounds in flight counted on (why: docs/design.md §6, "Lane affinity and
   * claiming outside rounds"). The buffer may briefly hold up to twice its
   * target; with none (prefetch off, slow handlers, a fleet cap) nothing
   * changes.
   */
  claimRoomBesideRounds(): number {
    return this.claimRoom() + Math.min(this.roundsRoom, this.buffer.target());
  }

  /** Claims may run (the consumer started). */
  start(): void {
    this.active = true;
  }

  /** No more claims, and items handed over from now on go back (the consumer is stopping). */
  stopClaiming(): void {
    this.active = false;
    this.notify();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  /** A pause holds new claims and hands back what waits unstarted (running items go on); a resume lets them go on. */
  setPaused(paused: boolean): void {
    this.paused = paused;
    if (paused) this.startPrefetched();
    else this.kick();
  }

  /** Wakes the loop (and the wake reader: room may have changed). */
  notify(): void {
    this.wake.notify();
    this.host.roomChanged();
  }

  /** Claimable heads may exist beyond any named ids: the next claim round looks. */
  noteWork(): void {
    this.mightHaveWork = true;
    this.workSignals++;
  }

  takeEntries(entries: readonly WakeEntry[]): void {
    if (entries.length === 0) return;
    this.counters.wakeEntriesRead += entries.length;
    for (const e of entries) this.takeWake(e);
    this.pendingAcks.push(...entries);
    this.wake.notify();
  }

  /** Claim now. */
  kick(): void {
    this.noteWork();
    this.wake.notify();
  }

  takeWake(m: Pick<WakeMessage, 'ids' | 'more'>): void {
    // A fair queue's items are claimed by their rounds (docs/design.md, "Fair queues"): claimed by name, in the
    // order their wake-ups came, one key's flood would run ahead of the keys announced after it.
    if (this.host.fair()) {
      this.noteWork();
      return;
    }
    for (const id of m.ids) this.targeted.add(id);
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
    else if (this.buffer.has(id)) this.cancelHints.add(id);
  }

  /**
   * Nothing left to claim as far as it knows: no buffered items, no search for heads
   * in flight or wanted (rounds that only claim named ids do not count: those are
   * being taken), and its last look found no more heads. A consumer working through
   * a backlog makes no offers (docs/design.md §6).
   */
  caughtUp(): boolean {
    return (
      this.buffer.size === 0 &&
      this.searching === 0 &&
      this.host.held.heldRoom === 0 &&
      !this.mightHaveWork &&
      !this.lastRoundFull
    );
  }

  /** Room held for a handover was given back: buffered items may start in freed slots, and claims may use it. */
  roomReturned(): void {
    this.startPrefetched();
    this.notify();
  }

  /** Claimed for us outside a round (a handover): into the buffer, or straight back if we began stopping meanwhile. */
  admit(items: readonly ClaimedItem[], claimedAtMs: number): void {
    if (items.length === 0) return;
    if (this.active) {
      this.takeClaimed(items, claimedAtMs);
      return;
    }
    this.counters.claimed += items.length;
    this.handBack.releaseLate(
      items.map((item) => ({ item, claimedAtMs })),
      'consumer stopping',
    );
  }

  /** At stop, once the loop has ended: everything still in the buffer goes back unstarted. */
  releaseBuffered(): Promise<void> {
    return this.handBack.release(this.buffer.drain(), 'shutdown');
  }

  /** At stop, after the drain: items handed over while stopping have gone back. */
  async lateReleasesSettled(): Promise<void> {
    await this.handBack.settled();
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
    while (this.active) {
      this.startPrefetched();
      const room = Math.min(MAX_CLAIM_ITEMS, this.claimRoom());
      // A claim round costs about the same wait whatever its size: while the buffer
      // still holds work for the slots, let the room grow to half the buffer first.
      const worthARound = this.buffer.size === 0 || room >= Math.ceil(this.buffer.target() / 2);
      // Rounds overlap while claims come back full, and for named ids (a wake-up
      // for new work must not wait behind a round looking for other heads).
      const maxRounds =
        this.settings.maxProcessing === undefined && (this.lastRoundFull || this.targeted.size > 0)
          ? MAX_CLAIM_ROUNDS
          : 1;
      const holdUntil = Math.max(this.claimBackoffUntil, this.cappedUntil);
      const backingOff = Date.now() < holdUntil;
      if (
        !this.paused &&
        !backingOff &&
        room > 0 &&
        worthARound &&
        rounds.size < maxRounds &&
        (this.mightHaveWork || this.targeted.size > 0)
      ) {
        this.roundsRoom += room;
        // The round searches for heads when it may have work beyond named ids (claimRound's lookFurther, read now, before its first await).
        const search = this.mightHaveWork || this.targeted.size > room + MAX_WAITING_IDS;
        if (search) this.searching++;
        const round: Promise<void> = this.claimRound(room)
          .catch((error: unknown) => {
            this.counters.errors++;
            this.lastRoundFull = false;
            this.claimBackoffUntil = Date.now() + CLAIM_ERROR_BACKOFF_MS;
            this.log.error({ err: (error as Error).message }, 'claim failed; retrying');
          })
          .finally(() => {
            this.roundsRoom -= room;
            if (search) this.searching--;
            rounds.delete(round);
            this.wake.notify();
          });
        rounds.add(round);
        continue;
      }
      // Buffered items are looked at often enough to go back before a third of their lease has passed.
      const until = this.buffer.size > 0 ? this.settings.leaseMs / 6 : IDLE_WAIT_MS;
      await this.wake.wait(Math.max(1, backingOff ? Math.min(until, holdUntil - Date.now()) : until));
    }
    clearTimeout(this.lookTimer);
    await Promise.allSettled([...rounds]);
  }

  private lookSoon(): void {
    if (this.lookTimer !== undefined) return;
    this.lookTimer = setTimeout(() => {
      this.lookTimer = undefined;
      if (!this.active) return;
      this.noteWork();
      this.wake.notify();
    }, LOOK_AGAIN_MS);
    this.lookTimer.unref();
  }

  private async claimRound(free: number): Promise<void> {
    this.counters.claimRounds++;
    /** Signals up to here are answered by this round's head search, if it makes one. */
    let seenSignals = this.workSignals;
    const startedAt = performance.now();
    const acks = this.pendingAcks;
    this.pendingAcks = [];
    const named = [...this.targeted];
    const ids = named.slice(0, free);
    // Named items beyond this round's room wait for the next round, oldest first (dropped as hints, they
    // starved while new wake-ups filled a small room: docs/design.md §6). Past MAX_WAITING_IDS a head search finds them.
    this.targeted = new Set(named.slice(free, free + MAX_WAITING_IDS));
    const lookFurther = this.mightHaveWork || named.length > free + MAX_WAITING_IDS;
    if (this.settings.maxProcessing !== undefined) {
      const capRoom = await this.claims.capRoom(this.settings.maxProcessing);
      if (capRoom <= 0) {
        for (const id of ids) this.targeted.add(id);
        this.pendingAcks.unshift(...acks);
        this.noteWork();
        // Try again shortly, or as soon as one of ours finishes (finished() lifts this).
        this.cappedUntil = Date.now() + CAPPED_RETRY_MS;
        return;
      }
      free = Math.min(free, capRoom);
      for (const id of ids.splice(free)) this.targeted.add(id);
    }
    // Each call's items are stamped with its own start: their leases run from about then.
    const byIdsAtMs = Date.now();
    const staleOnly = this.host.staleOnly();
    if (staleOnly) this.counters.staleOnlyRounds++;
    const claimed = await this.claims.byIds(ids, staleOnly);
    if (ids.length > 0) this.noteClaimMs(byIdsAtMs);
    // Named by a wake-up: start them now, before looking for other heads.
    if (claimed.length > 0) this.takeClaimed(claimed, byIdsAtMs);
    let more = false;
    if (claimed.length < free && lookFurther) {
      const want = free - claimed.length;
      seenSignals = this.workSignals;
      const claimAtMs = Date.now();
      const r = await this.claims.heads(want, staleOnly);
      this.noteClaimMs(claimAtMs);
      // While stopping these wait in the buffer, and stop() releases them.
      if (r.items.length > 0) this.takeClaimed(r.items, claimAtMs);
      claimed.push(...r.items);
      more = r.moreAvailable || r.items.length >= want;
    } else {
      // Only named ids were claimed: more work is likely only if something already said so.
      more = lookFurther && claimed.length >= free;
    }
    this.mightHaveWork = more;
    // A lane advanced (or a wake-up or sweep came) after the head search read: look again
    // shortly. Not at once: under load the next finish says so anyway, and a round per
    // signal would make many small claims; idle, this keeps a lane from waiting for the sweep.
    if (!more && this.workSignals !== seenSignals) this.lookSoon();
    this.lastRoundFull = claimed.length >= free;
    const durationMs = performance.now() - startedAt;
    this.host.emit('claimRound', { claimed: claimed.length, durationMs, targeted: ids.length });
    if (claimRoundChannel.hasSubscribers) {
      const endedAtMs = Date.now();
      const message: ClaimRoundMessage = {
        queue: this.settings.queue,
        consumer: this.name,
        startedAtMs: endedAtMs - durationMs,
        endedAtMs,
        targeted: ids.length,
        claimed: claimed.map((c) => c.id),
      };
      claimRoundChannel.publish(message);
    }
    if (acks.length > 0) this.host.ack(acks);
    if (more && this.freeSlots() === 0) await this.host.followUp();
  }

  private noteClaimMs(sentAtMs: number): void {
    const now = Date.now();
    this.host.claimTimed(now - sentAtMs);
    if (this.buffer.noteClaimMs(now - sentAtMs, now)) {
      this.log.warn(
        { claimMs: now - sentAtMs, leaseMs: this.settings.leaseMs },
        'a claim took a third of the lease or more: prefetch is off, and items claimed past two thirds of it go back unstarted; raise leaseMs',
      );
    }
  }

  private takeClaimed(items: readonly ClaimedItem[], claimedAtMs: number): void {
    this.counters.claimed += items.length;
    this.buffer.push(items, claimedAtMs);
    this.startPrefetched();
  }

  /** Starts buffered items while slots are free; hands back those that waited too long. */
  private startPrefetched(): void {
    if (!this.active) return;
    // Paused: nothing starts; what a round in flight at the pause claimed, or the buffer held, goes back unstarted.
    if (this.paused) {
      if (this.buffer.size > 0) void this.handBack.release(this.buffer.drain(), 'queue paused');
      return;
    }
    const { start, expired } = this.buffer.take(this.freeSlots(), Date.now());
    for (const p of start) this.startJob(p.item, p.claimedAtMs);
    if (expired.length > 0) void this.handBack.release(expired, 'prefetch wait exceeded a third of the lease');
    // Without a prefetch buffer, items claimed beyond the free slots (an arrival at insert took a slot a
    // round in flight counted on) go back at once, keeping their place, and a wake-up tells the others.
    if (this.prefetchOff && this.buffer.size > 0) {
      void this.handBack.release(this.buffer.drain(), 'no free slot').then(() => this.host.followUp());
    }
  }

  private startJob(item: ClaimedItem, claimedAtMs: number): void {
    const run = runJob(this.runDeps, item, claimedAtMs);
    this.running.set(item.id, run);
    run.start();
    if (this.cancelHints.delete(item.id)) run.checkLedger();
    if (item.group !== undefined) this.counters.coalesced += item.group.ids.length;
    this.host.emit('started', item);
    void run.done.then(
      (outcome) => this.finished(item, outcome, run.handlerMs, run.laneAdvanced, run.keyAdmitted),
      (error: unknown) => {
        this.counters.errors++;
        this.log.error({ id: item.id, err: (error as Error).message }, 'executor failed');
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
    this.finalizing.delete(item.id);
    this.counters[outcome]++;
    this.cappedUntil = 0;
    // The slot is free; a finished lane head has a successor worth claiming right here (lane affinity),
    // unless the completion said the lane has none waiting.
    // A released item may be due again at once (a block whose key was woken while it ran). A keyed
    // item's end may have admitted its key's next waiting item, which no wake-up announces, unless
    // the completion said it claimed all it admitted (key affinity) or admitted none.
    if (
      (item.lane !== null && laneAdvanced !== false) ||
      (item.concurrencyKey !== null && keyAdmitted !== false) ||
      outcome === 'released'
    )
      this.noteWork();
    this.host.emit('outcome', item, outcome, handlerMs);
    this.notify();
  }
}
