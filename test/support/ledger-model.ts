import { ITEM_STATES, TERMINAL_STATES, type ClaimedItem, type ItemState } from '../../src/ledger/types.js';
import { nowPlus, reached, readInstant, SLACK_MS, type Bracket, type Instant } from './ledger-clock.js';

/**
 * An in-memory model of one queue of the ledger (docs/design/states.md), for the
 * conformance state machine in test/conformance/. It says what each ledger
 * call must do. Where the outcome hangs on the exact instant of the ledger's
 * clock (a short delay or lease running out while a call runs), it says which
 * items surely and which maybe qualify, and the caller checks the ledger's
 * answer against that and applies it.
 */

/** How the holder of a claim ends it (the finalize calls of docs/design/states.md). */
export type Finish =
  | { kind: 'complete' }
  | { kind: 'fail' }
  | { kind: 'skip' }
  | { kind: 'cancelClaimed' }
  | { kind: 'retry'; delayMs: number }
  | { kind: 'release'; delayMs: number }
  | { kind: 'block'; key: string };

export const RETRY_ERROR = 'flaky: try again';
export const FAIL_ERROR = 'fatal: never works';

export interface NewItemSpec {
  lane: string | null;
  key: string | null;
  delayMs: number;
  priority: number;
  maxAttempts: number;
}

export interface ModelItem {
  id: string;
  /** Creation order within the run: the item's name in messages (i0, i1, …). */
  n: number;
  lane: string | null;
  laneSeq: number | null;
  priority: number;
  maxAttempts: number;
  key: string | null;
  state: ItemState;
  isHead: boolean;
  attempt: number;
  runAfter: Instant;
  lease: { token: string; owner: string; until: Instant } | null;
  /** The model step of the claim that began the current attempt (compared with dependency wake steps). */
  startedStep: number;
  cancelRequested: boolean;
  failureClass: string | null;
  lastError: string | null;
  dependencyKey: string | null;
  replayOf: string | null;
  replayed: boolean;
}

/** What the model and the ledger must agree on for every item after every step. */
export interface ItemView {
  state: ItemState;
  isHead: boolean;
  attempt: number;
  lane: string | null;
  laneSeq: number | null;
  priority: number;
  maxAttempts: number;
  idempotencyKey: string | null;
  cancelRequested: boolean;
  failureClass: string | null;
  lastError: string | null;
  replayOf: string | null;
  replayed: boolean;
  /** Only while processing: the holder (token and owner). */
  holder: { token: string | null; owner: string | null } | null;
  /** Only while blocked. */
  dependencyKey: string | null;
}

export type ReclaimKind = 'reclaimed' | 'dead' | 'cancelled';

const isTerminal = (s: ItemState): boolean => TERMINAL_STATES.includes(s);

export class LedgerModel {
  readonly items: ModelItem[] = [];
  /** Every claim ever handed out, in order: finalize commands pick current and stale ones alike. */
  readonly handles: ClaimedItem[] = [];
  /** Incremented once per command: orders claims against dependency wakes. */
  step = 0;
  /** The ledger clock's last reading (ms). */
  clock = 0;
  private readonly byId = new Map<string, ModelItem>();
  private readonly laneNext = new Map<string, number>();
  private readonly keys = new Map<string, ModelItem>();
  private readonly wokenStep = new Map<string, number>();

  item(id: string): ModelItem {
    const i = this.byId.get(id);
    if (!i) throw new Error(`model: unknown item ${id}`);
    return i;
  }

  label(id: string): string {
    const i = this.byId.get(id);
    return i ? `i${i.n}` : `?${id}`;
  }

  inState(states: readonly ItemState[]): ModelItem[] {
    return this.items.filter((i) => states.includes(i.state));
  }

  counts(): Record<ItemState, number> {
    const out = Object.fromEntries(ITEM_STATES.map((s) => [s, 0])) as Record<ItemState, number>;
    for (const i of this.items) out[i.state] += 1;
    return out;
  }

  view(i: ModelItem): ItemView {
    return {
      state: i.state,
      isHead: i.isHead,
      attempt: i.attempt,
      lane: i.lane,
      laneSeq: i.laneSeq,
      priority: i.priority,
      maxAttempts: i.maxAttempts,
      idempotencyKey: i.key,
      cancelRequested: i.cancelRequested,
      failureClass: i.failureClass,
      lastError: i.lastError,
      replayOf: i.replayOf,
      replayed: i.replayed,
      holder: i.lease ? { token: i.lease.token, owner: i.lease.owner } : null,
      dependencyKey: i.state === 'blocked' ? i.dependencyKey : null,
    };
  }

  /** Narrows the model's instants to what the ledger holds, once checked against them. */
  observed(id: string, runAfter: Date, leaseUntil: Date | null): void {
    const i = this.item(id);
    i.runAfter = readInstant(runAfter);
    if (i.lease && leaseUntil) i.lease.until = readInstant(leaseUntil);
  }

  /** The answer an enqueue must give, were a new item to get `newId`; records it. */
  enqueue(spec: NewItemSpec, newId: string, b: Bracket): { id: string; duplicate: boolean; laneSeq: number | null } {
    const first = spec.key === null ? undefined : this.keys.get(spec.key);
    if (first) return { id: first.id, duplicate: true, laneSeq: first.laneSeq };
    const item = this.add({ ...spec, id: newId, replayOf: null, runAfter: nowPlus(b, spec.delayMs) });
    return { id: item.id, duplicate: false, laneSeq: item.laneSeq };
  }

  private add(spec: NewItemSpec & { id: string; replayOf: string | null; runAfter: Instant }): ModelItem {
    let laneSeq: number | null = null;
    let isHead = true;
    if (spec.lane !== null) {
      laneSeq = (this.laneNext.get(spec.lane) ?? 0) + 1;
      this.laneNext.set(spec.lane, laneSeq);
      // The lane is idle (no unfinished item): the new item is its head at once.
      isHead = !this.items.some((o) => o.lane === spec.lane && !isTerminal(o.state));
    }
    const item: ModelItem = {
      id: spec.id,
      n: this.items.length,
      lane: spec.lane,
      laneSeq,
      priority: spec.priority,
      maxAttempts: spec.maxAttempts,
      key: spec.key,
      state: 'pending',
      isHead,
      attempt: 0,
      runAfter: spec.runAfter,
      lease: null,
      startedStep: -1,
      cancelRequested: false,
      failureClass: null,
      lastError: null,
      dependencyKey: null,
      replayOf: spec.replayOf,
      replayed: false,
    };
    this.items.push(item);
    this.byId.set(item.id, item);
    if (spec.key !== null) this.keys.set(spec.key, item);
    return item;
  }

  /** Due pending heads for a claim within `b`: surely due, and due or not depending on the instant. */
  claimable(b: Bracket): { sure: ModelItem[]; maybe: ModelItem[] } {
    const heads = this.items.filter((i) => i.state === 'pending' && i.isHead);
    return {
      sure: heads.filter((i) => reached(i.runAfter, b) === 'yes'),
      maybe: heads.filter((i) => reached(i.runAfter, b) === 'maybe'),
    };
  }

  /** Ids of the pending lane heads (claimable once due). */
  pendingHeads(): Set<string> {
    return new Set(this.items.filter((i) => i.state === 'pending' && i.isHead).map((i) => i.id));
  }

  /** Records a claim the ledger made (the caller has checked it was claimable). */
  claimed(c: ClaimedItem, leaseMs: number, b: Bracket): void {
    const i = this.item(c.id);
    i.state = 'processing';
    i.attempt += 1;
    i.lease = { token: c.leaseToken, owner: c.leaseOwner, until: nowPlus(b, leaseMs) };
    i.startedStep = this.step;
    i.cancelRequested = false;
    this.handles.push(c);
  }

  /** A finalize on this handle is a CAS on (id, token, processing): does it win? */
  holds(h: ClaimedItem): boolean {
    const i = this.item(h.id);
    return i.state === 'processing' && i.lease?.token === h.leaseToken;
  }

  /**
   * The answer a finalize must give; records it when it wins. `wokenFirst`
   * (a block racing a wake of its key) says the wake committed first.
   */
  finish(h: ClaimedItem, f: Finish, b: Bracket, wokenFirst = false): { won: boolean; state?: ItemState } {
    if (!this.holds(h)) return { won: false };
    const i = this.item(h.id);
    const end = (
      state: ItemState,
      failureClass: string | null,
      lastError: string | null,
    ): { won: true; state: ItemState } => {
      this.leave(i, state);
      i.failureClass = failureClass;
      i.lastError = lastError;
      return { won: true, state };
    };
    switch (f.kind) {
      case 'complete':
        return end('completed', null, null);
      case 'fail':
        return end('dead', 'permanent', FAIL_ERROR);
      case 'skip':
        // As a completion: an earlier attempt's error belongs to the history; the skip's reason
        // (none here) is its last word.
        return end('skipped', null, null);
      case 'cancelClaimed':
        return end('cancelled', 'cancelled', i.lastError);
      case 'retry':
        if (i.attempt >= i.maxAttempts) return end('dead', 'error', RETRY_ERROR);
        i.runAfter = nowPlus(b, f.delayMs);
        return end('pending', 'error', RETRY_ERROR);
      case 'release':
        i.attempt -= 1;
        if (f.delayMs > 0) i.runAfter = nowPlus(b, f.delayMs);
        return end('pending', i.failureClass, i.lastError);
      case 'block': {
        i.attempt -= 1;
        // A wake of the key since this attempt began: back to pending, due time kept (the wake is never lost).
        const woken = wokenFirst || (this.wokenStep.get(f.key) ?? -1) >= i.startedStep;
        if (!woken) i.dependencyKey = f.key;
        return end(woken ? 'pending' : 'blocked', i.failureClass, i.lastError);
      }
    }
  }

  /** Items blocked on `key`, in creation order. */
  blockedOn(key: string): ModelItem[] {
    return this.items.filter((i) => i.state === 'blocked' && i.dependencyKey === key);
  }

  /** wakeDependency(key): every item blocked on it goes pending, due now. Returns their ids. */
  wake(key: string, b: Bracket): string[] {
    const woken = this.blockedOn(key);
    for (const i of woken) {
      i.state = 'pending';
      i.runAfter = nowPlus(b, 0);
    }
    this.wokenStep.set(key, this.step);
    return woken.map((i) => i.id);
  }

  /** The answer of an operator cancel; records it. */
  cancel(id: string, reason: string | undefined): 'cancelled' | 'cancel_requested' | 'not_cancellable' {
    const i = this.item(id);
    if (i.state === 'processing') {
      i.cancelRequested = true;
      i.lastError = reason ?? 'cancel requested';
      return 'cancel_requested';
    }
    if (i.state !== 'pending' && i.state !== 'blocked') return 'not_cancellable';
    this.leave(i, 'cancelled');
    i.failureClass = 'cancelled';
    i.lastError = reason ?? null;
    return 'cancelled';
  }

  /** Why a replay with this guard must be refused, or undefined when it must go through. */
  replayRefusal(id: string, expectAttempt: number, expectLastError: string | null): string | undefined {
    const i = this.item(id);
    if (i.state !== 'dead' && i.state !== 'cancelled') return 'not_replayable_state';
    if (i.replayed) return 'already_replayed';
    if (i.attempt !== expectAttempt) return 'attempt_mismatch';
    if (i.lastError !== expectLastError) return 'error_mismatch';
    return undefined;
  }

  /** Records a replay: a new item at the tail of the original's lane, fresh budget, due now. */
  replayed(id: string, newId: string, b: Bracket): ModelItem {
    const o = this.item(id);
    o.replayed = true;
    return this.add({
      id: newId,
      lane: o.lane,
      key: null,
      delayMs: 0,
      priority: o.priority,
      maxAttempts: o.maxAttempts,
      replayOf: o.id,
      runAfter: nowPlus(b, 0),
    });
  }

  /** Processing items whose lease surely / maybe ran out for a reclaim within `b`. */
  expired(b: Bracket): { sure: ModelItem[]; maybe: ModelItem[] } {
    const held = this.items.filter((i) => i.state === 'processing' && i.lease !== null);
    return {
      sure: held.filter((i) => i.lease && reached(i.lease.until, b) === 'yes'),
      maybe: held.filter((i) => i.lease && reached(i.lease.until, b) === 'maybe'),
    };
  }

  /** What reclaiming this expired item must do; records it. */
  reclaim(id: string): ReclaimKind {
    const i = this.item(id);
    const owner = i.lease?.owner ?? '?';
    if (i.cancelRequested) {
      this.leave(i, 'cancelled');
      i.failureClass = 'cancelled';
      return 'cancelled';
    }
    const spent = i.attempt >= i.maxAttempts;
    // The expired attempt counts; the due time stays (the item keeps its place).
    this.leave(i, spent ? 'dead' : 'pending');
    i.failureClass = 'lease_expired';
    i.lastError = `lease held by ${owner} expired`;
    return spent ? 'dead' : 'reclaimed';
  }

  /** The earliest instant within `horizonMs` of the clock at which a due time or a lease runs out. */
  nextEvent(what: 'due' | 'lease', horizonMs: number): number | undefined {
    const ahead = (i: Instant): boolean => i.hi >= this.clock - SLACK_MS && i.lo <= this.clock + horizonMs;
    const instants =
      what === 'due'
        ? this.items.filter((i) => i.state === 'pending').map((i) => i.runAfter)
        : this.items.flatMap((i) => (i.state === 'processing' && i.lease ? [i.lease.until] : []));
    const his = instants.filter(ahead).map((i) => i.hi);
    return his.length === 0 ? undefined : Math.min(...his);
  }

  /** The model's own invariant: a lane's head is its earliest unfinished item, and only it. */
  checkLanes(): string | undefined {
    const lanes = new Set(this.items.flatMap((i) => (i.lane === null ? [] : [i.lane])));
    for (const lane of lanes) {
      const open = this.items
        .filter((i) => i.lane === lane && !isTerminal(i.state))
        .sort((a, b) => (a.laneSeq ?? 0) - (b.laneSeq ?? 0));
      const heads = open.filter((i) => i.isHead);
      if (open.length > 0 && (heads.length !== 1 || heads[0] !== open[0]))
        return `model lane ${lane}: heads ${heads.map((i) => `i${i.n}`).join(',')}`;
    }
    return undefined;
  }

  /** Leaves `processing` (or pending/blocked, for a cancel) for `state`; a head that ends hands its lane on. */
  private leave(i: ModelItem, state: ItemState): void {
    i.state = state;
    i.lease = null;
    if (!isTerminal(state) || i.lane === null || !i.isHead) return;
    const next = this.items
      .filter((o) => o.lane === i.lane && (o.laneSeq ?? 0) > (i.laneSeq ?? 0) && o.state === 'pending')
      .sort((a, b) => (a.laneSeq ?? 0) - (b.laneSeq ?? 0))[0];
    if (next) next.isHead = true;
  }
}
