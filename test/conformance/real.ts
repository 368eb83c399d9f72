import type fc from 'fast-check';
import { expect } from 'vitest';
import type { FinalizeResult, Ledger } from '../../src/ledger/ledger.js';
import { ITEM_STATES, type ClaimedItem, type WorkItem } from '../../src/ledger/types.js';
import { within, type Bracket } from '../support/ledger-clock.js';
import { FAIL_ERROR, RETRY_ERROR, type Finish, type ItemView, type LedgerModel } from '../support/ledger-model.js';
import { exactCounts } from '../support/counts.js';

/** The system under test: the ledger, and the queue of one run (queue names are unique per run). */
export interface Real {
  ledger: Ledger;
  queue: string;
}

export type LedgerCommand = fc.AsyncCommand<LedgerModel, Real>;

/** Lease lengths: "short" runs out within a run (the clock is waited on, never slept on), "long" never does. */
export const SHORT_MS = 30;
export const LONG_MS = 3_600_000;
/** A dependency wait that never expires within a run. */
export const BLOCK_WAIT_MS = 600_000;
/** How far ahead a wait for the ledger clock may look. */
export const HORIZON_MS = 1_000;

/** A dependency key of this run: wake marks are per key across queues, so keys are scoped by the run's queue. */
export function depKey(r: Real, name: string): string {
  return `${r.queue}/${name}`;
}

/**
 * A command: `check` decides whether it applies to the model (fast-check
 * skips it otherwise, also while shrinking); `run` drives the ledger and the
 * model and checks them against each other, then every item is compared.
 */
export function command(
  label: string,
  check: (m: Readonly<LedgerModel>) => boolean,
  run: (m: LedgerModel, r: Real) => Promise<void>,
): LedgerCommand {
  return {
    check,
    run: async (m, r) => {
      await run(m, r);
      await conforms(m, r, label);
    },
    toString: () => label,
  };
}

/** Runs `fn` between two readings of the ledger's clock, as one model step. */
export async function bracketed<T>(m: LedgerModel, r: Real, fn: () => Promise<T>): Promise<{ value: T; b: Bracket }> {
  const before = (await r.ledger.now()).getTime();
  const value = await fn();
  const after = (await r.ledger.now()).getTime();
  m.step += 1;
  m.clock = after;
  return { value, b: { before, after } };
}

/** The k-th most recent claim handed out (k = 0: the latest). */
export function recent(m: Readonly<LedgerModel>, k: number): ClaimedItem {
  const h = m.handles[m.handles.length - 1 - k];
  if (!h) throw new Error(`no handle h-${k}`);
  return h;
}

export function viewOf(w: WorkItem): ItemView {
  return {
    state: w.state,
    isHead: w.isHead,
    attempt: w.attempt,
    lane: w.lane,
    laneSeq: w.laneSeq,
    priority: w.priority,
    maxAttempts: w.maxAttempts,
    idempotencyKey: w.idempotencyKey,
    cancelRequested: w.cancelRequested,
    failureClass: w.failureClass,
    lastError: w.lastError,
    replayOf: w.replayOf,
    replayed: w.replayedAt !== null,
    holder: w.state === 'processing' ? { token: w.leaseToken, owner: w.leaseOwner } : null,
    dependencyKey: w.state === 'blocked' ? w.dependencyKey : null,
  };
}

/** Every item of the model against the ledger's row, and the queue's counts by state. */
export async function conforms(m: LedgerModel, r: Real, after: string): Promise<void> {
  const lanes = m.checkLanes();
  if (lanes !== undefined) throw new Error(lanes);
  const rows = await Promise.all(m.items.map((i) => r.ledger.get(i.id)));
  m.items.forEach((i, k) => {
    const w = rows[k];
    const what = `i${i.n} after step ${m.step} (${after})`;
    if (!w) throw new Error(`${what}: missing from the ledger`);
    expect(viewOf(w), what).toEqual(m.view(i));
    expect(
      within(w.runAfter, i.runAfter),
      `${what}: runAfter ${w.runAfter.getTime()} outside [${i.runAfter.lo}, ${i.runAfter.hi}]`,
    ).toBe(true);
    if (i.lease) {
      const until = w.leaseUntil?.getTime();
      expect(
        w.leaseUntil !== null && within(w.leaseUntil, i.lease.until),
        `${what}: leaseUntil ${until} outside [${i.lease.until.lo}, ${i.lease.until.hi}]`,
      ).toBe(true);
    }
    m.observed(i.id, w.runAfter, w.leaseUntil);
  });
  // A queue without items has no stats row.
  const counts = exactCounts((await r.ledger.stats(r.queue))[0]) ?? Object.fromEntries(ITEM_STATES.map((s) => [s, 0]));
  expect(counts, `counts by state after step ${m.step} (${after})`).toEqual(m.counts());
}

/** Ends a claim the way `f` says. */
export async function finishOn(ledger: Ledger, h: ClaimedItem, f: Finish): Promise<FinalizeResult> {
  switch (f.kind) {
    case 'complete':
      return ledger.complete(h);
    case 'fail':
      return ledger.fail(h, { error: FAIL_ERROR });
    case 'skip':
      return ledger.skip(h);
    case 'cancelClaimed':
      return ledger.cancelClaimed(h);
    case 'retry': {
      const { won, state } = await ledger.retry(h, { error: RETRY_ERROR, delayMs: f.delayMs });
      return { won, state };
    }
    case 'release':
      return ledger.release(h, { delayMs: f.delayMs });
    case 'block':
      return ledger.block(h, { dependencyKey: f.key, maxWaitMs: BLOCK_WAIT_MS });
  }
}

export function finishLabel(f: Finish): string {
  if (f.kind === 'retry' || f.kind === 'release') return `${f.kind}${f.delayMs === 0 ? '' : `+${f.delayMs}ms`}`;
  if (f.kind === 'block') return `block(${f.key})`;
  return f.kind;
}

/** A finalize's answer against the model's: who wins the CAS, and what state it wrote. */
export function expectFinish(
  got: FinalizeResult,
  want: { won: boolean; state?: string | undefined },
  what: string,
): void {
  expect(got.won, `${what}: won`).toBe(want.won);
  if (want.won) expect(got.state, `${what}: state`).toBe(want.state);
}

/**
 * A claim's answer within `b`, against the model: only claimable items
 * (surely or maybe due), distinct, within the limit, at least as many as
 * surely claimable up to the limit, and never a larger priority number
 * while a smaller-numbered one it left was surely claimable.
 */
export function expectClaim(
  m: LedgerModel,
  got: readonly ClaimedItem[],
  allowed: { sure: readonly { id: string; priority: number }[]; maybe: readonly { id: string }[] },
  limit: number,
  what: string,
  /** Picks the claim may have lost to a concurrent call that took the item away (a cancel). */
  lost = 0,
): void {
  const ids = got.map((c) => c.id);
  const ok = new Set([...allowed.sure, ...allowed.maybe].map((i) => i.id));
  expect(new Set(ids).size, `${what}: distinct items`).toBe(ids.length);
  for (const id of ids) expect(ok.has(id), `${what}: ${m.label(id)} was not claimable`).toBe(true);
  expect(ids.length, `${what}: at most the limit`).toBeLessThanOrEqual(limit);
  expect(ids.length, `${what}: every surely claimable item, up to the limit`).toBeGreaterThanOrEqual(
    Math.min(limit, allowed.sure.length) - lost,
  );
  const left = allowed.sure.filter((s) => !ids.includes(s.id));
  for (const c of got) {
    for (const s of left)
      expect(
        c.priority,
        `${what}: took ${m.label(c.id)} over ${m.label(s.id)} of a smaller priority`,
      ).toBeLessThanOrEqual(s.priority);
  }
}
