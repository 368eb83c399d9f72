import fc from 'fast-check';
import { expect } from 'vitest';
import { ReplayRejectedError } from '../../src/errors.js';
import type { EnqueueInput } from '../../src/ledger/ledger.js';
import { errorDigest } from '../../src/ledger/ids.js';
import type { ClaimedItem, ItemState } from '../../src/ledger/types.js';
import type { ReclaimOutcome } from '../../src/ledger/upkeep-types.js';
import { SLACK_MS } from '../support/ledger-clock.js';
import type { Finish, LedgerModel, ModelItem, NewItemSpec } from '../support/ledger-model.js';
import { waitFor } from '../support/ledger.js';
import {
  bracketed,
  command,
  depKey,
  expectClaim,
  expectFinish,
  finishLabel,
  finishOn,
  HORIZON_MS,
  LONG_MS,
  recent,
  SHORT_MS,
  viewOf,
  type LedgerCommand,
  type Real,
} from './real.js';

/**
 * Items a run may enqueue (replays come on top): enough for lanes to queue up, few enough to compare
 * every item after every step.
 */
export const MAX_ITEMS = 12;
/** Claim handles a finalize may pick, counted back from the latest (h-0). */
const RECENT_HANDLES = 3;

export const ownerArb = fc.constantFrom('w1', 'w2', 'w3');
export const limitArb = fc.integer({ min: 1, max: 3 });
export const leaseArb = fc.constantFrom(LONG_MS, SHORT_MS);
// Mostly the latest claim; older ones are often stale (their finalize must lose).
export const handleArb = fc.oneof({ arbitrary: fc.constant(0), weight: 3 }, fc.nat({ max: RECENT_HANDLES - 1 }));
export const depArb = fc.constantFrom('d0', 'd1');
const delayArb = fc.oneof({ arbitrary: fc.constant(0), weight: 4 }, fc.constantFrom(SHORT_MS, LONG_MS));

export const finishKindArb: fc.Arbitrary<Finish> = fc.oneof(
  { arbitrary: fc.constant<Finish>({ kind: 'complete' }), weight: 3 },
  { arbitrary: fc.constant<Finish>({ kind: 'fail' }), weight: 2 },
  { arbitrary: fc.constantFrom<Finish>({ kind: 'skip' }, { kind: 'cancelClaimed' }), weight: 1 },
  { arbitrary: delayArb.map((delayMs): Finish => ({ kind: 'retry', delayMs })), weight: 3 },
  { arbitrary: delayArb.map((delayMs): Finish => ({ kind: 'release', delayMs })), weight: 2 },
  { arbitrary: depArb.map((key): Finish => ({ kind: 'block', key })), weight: 2 },
);

/** A block's key is named d0/d1 in the command; the ledger sees the run's own key. */
export function scoped(r: Real, f: Finish): Finish {
  return f.kind === 'block' ? { kind: 'block', key: depKey(r, f.key) } : f;
}

export const ms = (n: number): string => (n === LONG_MS ? '1h' : `${n}ms`);

export function enqueueInput(r: Real, s: NewItemSpec): EnqueueInput {
  return {
    queue: r.queue,
    type: 't',
    payload: null,
    priority: s.priority,
    maxAttempts: s.maxAttempts,
    ...(s.lane !== null ? { lane: s.lane } : {}),
    ...(s.key !== null ? { idempotencyKey: s.key } : {}),
    ...(s.delayMs > 0 ? { delayMs: s.delayMs } : {}),
  };
}

export function specLabel(s: NewItemSpec): string {
  const parts = [s.lane === null ? 'no lane' : `lane ${s.lane}`];
  if (s.key !== null) parts.push(`key ${s.key}`);
  if (s.delayMs > 0) parts.push(`+${ms(s.delayMs)}`);
  if (s.priority !== 0) parts.push(`p${s.priority}`);
  parts.push(`max ${s.maxAttempts}`);
  return parts.join(' ');
}

const enqueueCommand = (specs: NewItemSpec[]): LedgerCommand =>
  command(
    `enqueue[${specs.map(specLabel).join('; ')}]`,
    (m) => m.items.length < MAX_ITEMS,
    async (m, r) => {
      const inputs = specs.map((s) => enqueueInput(r, s));
      const { value, b } = await bracketed(m, r, async () =>
        inputs.length === 1 && inputs[0] ? [await r.ledger.enqueue(inputs[0])] : r.ledger.enqueueMany(inputs),
      );
      expect(value).toHaveLength(specs.length);
      specs.forEach((s, k) => {
        const got = value[k];
        if (!got) throw new Error(`enqueue: no result ${k}`);
        expect(got, `enqueue result ${k}`).toEqual(m.enqueue(s, got.id, b));
      });
    },
  );

/**
 * An idempotency key stands for one request (queue, type, payload, lane): a
 * key with another lane is refused (IdempotencyConflictError), which the
 * model does not play, so each key has its lane. Repeats of a key still
 * differ in what the key does not cover: delay, priority, attempts.
 */
const LANE_OF_KEY: Record<string, string | null> = { k0: null, k1: 'a' };
export const withKeyLane = (s: NewItemSpec): NewItemSpec =>
  s.key === null ? s : { ...s, lane: LANE_OF_KEY[s.key] ?? null };

export const newItemArb: fc.Arbitrary<NewItemSpec> = fc
  .record({
    lane: fc.constantFrom<string | null>(null, null, 'a', 'a', 'b', 'c'),
    key: fc.constantFrom<string | null>(null, null, 'k0', 'k1'),
    delayMs: delayArb,
    priority: fc.constantFrom(0, 0, 1),
    maxAttempts: fc.constantFrom(1, 1, 2, 3),
  })
  .map(withKeyLane);

export const enqueueArb = fc.array(newItemArb, { minLength: 1, maxLength: 3 }).map(enqueueCommand);

const claimCommand = (owner: string, limit: number, leaseMs: number): LedgerCommand => {
  const label = `claim(${owner}, limit ${limit}, lease ${ms(leaseMs)})`;
  return command(
    label,
    () => true,
    async (m, r) => {
      const { value, b } = await bracketed(m, r, () => r.ledger.claim({ queue: r.queue, owner, limit, leaseMs }));
      const allowed = m.claimable(b);
      expectClaim(m, value.items, allowed, limit, label);
      if (allowed.sure.length > limit) expect(value.moreAvailable, `${label}: moreAvailable`).toBe(true);
      if (allowed.sure.length + allowed.maybe.length <= limit)
        expect(value.moreAvailable, `${label}: moreAvailable`).toBe(false);
      for (const c of value.items) {
        m.claimed(c, leaseMs, b);
        expect(viewOf(c), `${label}: the claimed ${m.label(c.id)} as returned`).toEqual(m.view(m.item(c.id)));
        expect(c.leaseOwner).toBe(owner);
      }
    },
  );
};

export const claimArb = fc.tuple(ownerArb, limitArb, leaseArb).map(([o, l, lease]) => claimCommand(o, l, lease));

/** What a finalize's message says of its handle: which item, and whether the claim is still current. */
export function handleNote(m: LedgerModel, k: number): string {
  const h = recent(m, k);
  return `h-${k} = ${m.label(h.id)} attempt ${h.attempt} (${m.holds(h) ? 'current' : 'stale'} claim)`;
}

/**
 * A command on the k-th most recent claim's handle: it applies once there is
 * one (and `also` holds); `run` gets the handle and the label with the
 * handle's note, read before anything runs.
 */
export function handleCommand(
  label: string,
  k: number,
  run: (m: LedgerModel, r: Real, h: ClaimedItem, what: string) => Promise<void>,
  also: (m: Readonly<LedgerModel>) => boolean = () => true,
): LedgerCommand {
  return command(
    label,
    (m) => m.handles.length > k && also(m),
    (m, r) => run(m, r, recent(m, k), `${label}, ${handleNote(m, k)}`),
  );
}

const finishCommand = (f: Finish, k: number): LedgerCommand => {
  const label = `${finishLabel(f)}(h-${k})`;
  return handleCommand(label, k, async (m, r, h, what) => {
    const sf = scoped(r, f);
    const { value, b } = await bracketed(m, r, () => finishOn(r.ledger, h, sf));
    expectFinish(value, m.finish(h, sf, b), what);
  });
};

export const finishArb = fc.tuple(finishKindArb, handleArb).map(([f, k]) => finishCommand(f, k));

const wakeCommand = (key: string): LedgerCommand =>
  command(
    `wakeDependency(${key})`,
    () => true,
    async (m, r) => {
      const { value, b } = await bracketed(m, r, () => r.ledger.wakeDependency(depKey(r, key), { queue: r.queue }));
      expect(value.map((w) => m.label(w.id)).sort(), `wakeDependency(${key}) woke`).toEqual(
        m
          .wake(depKey(r, key), b)
          .map((id) => m.label(id))
          .sort(),
      );
    },
  );

export const wakeArb = depArb.map(wakeCommand);

type CancelTarget = 'pending' | 'processing' | 'blocked' | 'ended';
const TARGET_STATES: Record<CancelTarget, readonly ItemState[]> = {
  pending: ['pending'],
  processing: ['processing'],
  blocked: ['blocked'],
  ended: ['completed', 'skipped', 'dead', 'cancelled'],
};

const cancelCommand = (target: CancelTarget, k: number, reason: string | undefined): LedgerCommand => {
  const label = `cancel(${target} #${k}${reason ? `, "${reason}"` : ''})`;
  return command(
    label,
    (m) => m.inState(TARGET_STATES[target]).length > k,
    async (m, r) => {
      const item = m.inState(TARGET_STATES[target])[k];
      if (!item) throw new Error(`${label}: no such item`);
      const { value } = await bracketed(m, r, () => r.ledger.cancel(item.id, reason));
      expect(value, `${label} of ${m.label(item.id)}`).toBe(m.cancel(item.id, reason));
    },
  );
};

export const cancelArb = fc
  .tuple(
    fc.constantFrom<CancelTarget>('pending', 'pending', 'processing', 'processing', 'processing', 'blocked', 'ended'),
    fc.nat({ max: 1 }),
    fc.constantFrom(undefined, 'operator says no'),
  )
  .map(([t, k, reason]) => cancelCommand(t, k, reason));

type ReplayTarget = 'dead' | 'cancelled' | 'other';
type Guard = 'as seen' | 'wrong attempt' | 'wrong error';
const REPLAY_STATES: Record<ReplayTarget, readonly ItemState[]> = {
  dead: ['dead'],
  cancelled: ['cancelled'],
  other: ['pending', 'processing', 'blocked', 'completed', 'skipped'],
};

const replayCommand = (target: ReplayTarget, k: number, guard: Guard): LedgerCommand => {
  const label = `replay(${target} #${k}, guard ${guard})`;
  return command(
    label,
    (m) => m.inState(REPLAY_STATES[target]).length > k && m.items.length < MAX_ITEMS + 4,
    async (m, r) => {
      const item = m.inState(REPLAY_STATES[target])[k];
      if (!item) throw new Error(`${label}: no such item`);
      // What the operator saw, then a guard made from it (the attempt count and the last error's digest).
      const attempt = item.attempt + (guard === 'wrong attempt' ? 1 : 0);
      const lastError = guard === 'wrong error' ? 'not what it said' : item.lastError;
      const refusal = m.replayRefusal(item.id, attempt, lastError);
      const { value, b } = await bracketed(m, r, () =>
        r.ledger
          .replay(item.id, { expectAttempt: attempt, expectErrorDigest: errorDigest(lastError) })
          .catch((e: unknown) => e),
      );
      const what = `${label} of ${m.label(item.id)}`;
      if (refusal !== undefined) {
        expect(value, `${what}: refused`).toBeInstanceOf(ReplayRejectedError);
        expect((value as ReplayRejectedError).reason, `${what}: refused because`).toBe(refusal);
        return;
      }
      if (value instanceof Error) throw value;
      const fresh = m.replayed(item.id, (value as { id: string }).id, b);
      expect(fresh.id, `${what}: a new item`).not.toBe(item.id);
    },
  );
};

export const replayArb = fc
  .tuple(
    fc.constantFrom<ReplayTarget>('dead', 'dead', 'cancelled', 'other'),
    fc.nat({ max: 1 }),
    fc.constantFrom<Guard>('as seen', 'as seen', 'wrong attempt', 'wrong error'),
  )
  .map(([t, k, g]) => replayCommand(t, k, g));

/** Waits until the ledger's clock has surely passed `at` (ms): no fixed sleep, a wait on the clock itself. */
async function clockPast(m: LedgerModel, r: Real, at: number): Promise<void> {
  const now = await waitFor(
    async () => {
      const t = (await r.ledger.now()).getTime();
      return t > at + SLACK_MS ? t : undefined;
    },
    5_000,
    `the ledger clock to pass ${at}`,
  );
  m.clock = now;
}

/**
 * A reclaim's answer within `b`: every surely expired lease, maybe the doubtful ones, nothing live;
 * each ends as the model says.
 */
function expectReclaim(
  m: LedgerModel,
  got: ReclaimOutcome,
  expired: { sure: ModelItem[]; maybe: ModelItem[] },
  what: string,
): void {
  const all = [...got.reclaimed, ...got.dead, ...got.cancelled];
  const ok = new Set([...expired.sure, ...expired.maybe].map((i) => i.id));
  for (const i of expired.sure) expect(all, `${what}: the expired lease of i${i.n}`).toContain(i.id);
  for (const id of all) expect(ok.has(id), `${what}: ${m.label(id)} had a live lease`).toBe(true);
  expect(new Set(all).size).toBe(all.length);
  const kinds = [
    ...got.reclaimed.map((id) => [id, 'reclaimed'] as const),
    ...got.dead.map((id) => [id, 'dead'] as const),
    ...got.cancelled.map((id) => [id, 'cancelled'] as const),
  ];
  for (const [id, kind] of kinds) expect(kind, `${what}: ${m.label(id)} ended as`).toBe(m.reclaim(id));
}

const reclaimCommand = (waitForExpiry: boolean): LedgerCommand => {
  const label = waitForExpiry ? 'reclaimExpired(after the next lease runs out)' : 'reclaimExpired()';
  return command(
    label,
    (m) => !waitForExpiry || m.nextEvent('lease', HORIZON_MS) !== undefined,
    async (m, r) => {
      const at = waitForExpiry ? m.nextEvent('lease', HORIZON_MS) : undefined;
      if (at !== undefined) await clockPast(m, r, at);
      const { value, b } = await bracketed(m, r, () => r.ledger.reclaimExpired({ queue: r.queue }));
      expectReclaim(m, value, m.expired(b), label);
    },
  );
};

export const reclaimArb = fc.constantFrom(true, true, false).map(reclaimCommand);

/** Lets the ledger's clock pass the next short due time (a delayed enqueue, retry or release). */
export const tickArb = fc.constant(null).map(() =>
  command(
    'waitUntilNextDue()',
    (m) => m.nextEvent('due', HORIZON_MS) !== undefined,
    async (m, r) => {
      const at = m.nextEvent('due', HORIZON_MS);
      if (at !== undefined) await clockPast(m, r, at);
      m.step += 1;
    },
  ),
);
