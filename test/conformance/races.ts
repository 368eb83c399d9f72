import fc from 'fast-check';
import { expect } from 'vitest';
import type { Finish } from '../support/ledger-model.js';
import {
  depArb,
  finishKindArb,
  handleArb,
  handleCommand,
  leaseArb,
  limitArb,
  ms,
  ownerArb,
  scoped,
} from './commands.js';
import {
  bracketed,
  command,
  depKey,
  expectClaim,
  expectFinish,
  finishLabel,
  finishOn,
  viewOf,
  type LedgerCommand,
} from './real.js';

/*
 * Calls issued together (Promise.all), where the order the server runs them
 * in is not ours to choose. The model checks what holds whichever order it
 * was (one winner per CAS, no item claimed twice, no wake lost) and then
 * applies the order the answers show.
 */

/**
 * Two owners claim at once: never the same item, only claimable ones, and between them at least
 * what either alone would take.
 */
const claimRace = (limits: [number, number], leaseMs: number): LedgerCommand => {
  const label = `race(claim(w1, limit ${limits[0]}) ‖ claim(w2, limit ${limits[1]}), lease ${ms(leaseMs)})`;
  return command(
    label,
    () => true,
    async (m, r) => {
      const { value, b } = await bracketed(m, r, () =>
        Promise.all(limits.map((limit, k) => r.ledger.claim({ queue: r.queue, owner: `w${k + 1}`, limit, leaseMs }))),
      );
      const allowed = m.claimable(b);
      const anyOf = { sure: [], maybe: [...allowed.sure, ...allowed.maybe] };
      const [a, c] = value;
      if (!a || !c) throw new Error(`${label}: missing answers`);
      expectClaim(m, a.items, anyOf, limits[0], `${label}, w1`);
      expectClaim(m, c.items, anyOf, limits[1], `${label}, w2`);
      const both = a.items.filter((x) => c.items.some((y) => y.id === x.id));
      expect(
        both.map((x) => m.label(x.id)),
        `${label}: claimed by both`,
      ).toEqual([]);
      // Each claimer's picks are won by one of the two: together they hold at least what either picked.
      const least = Math.max(...limits.map((l) => Math.min(l, allowed.sure.length)));
      expect(a.items.length + c.items.length, `${label}: claimed between them`).toBeGreaterThanOrEqual(least);
      for (const x of [...a.items, ...c.items]) {
        m.claimed(x, leaseMs, b);
        expect(viewOf(x), `${label}: the claimed ${m.label(x.id)} as returned`).toEqual(m.view(m.item(x.id)));
      }
    },
  );
};

export const claimRaceArb = fc.tuple(limitArb, limitArb, leaseArb).map(([l1, l2, lease]) => claimRace([l1, l2], lease));

/** Two finalizes of one claim at once: exactly one wins while the claim is current, none once it is stale. */
const finishRace = (fs: [Finish, Finish], k: number): LedgerCommand => {
  const label = `race(${finishLabel(fs[0])} ‖ ${finishLabel(fs[1])})(h-${k})`;
  return handleCommand(label, k, async (m, r, h, what) => {
    const scopedFs = fs.map((f) => scoped(r, f));
    const { value, b } = await bracketed(m, r, () => Promise.all(scopedFs.map((f) => finishOn(r.ledger, h, f))));
    const winners = value.flatMap((v, i) => (v.won ? [i] : []));
    const current = m.holds(h);
    expect(winners.length, `${what}: winners`).toBe(current ? 1 : 0);
    const w = winners[0];
    const f = w === undefined ? undefined : scopedFs[w];
    const got = w === undefined ? undefined : value[w];
    if (f && got) expectFinish(got, m.finish(h, f, b), `${what}, winner ${w}`);
  });
};

export const finishRaceArb = fc
  .tuple(finishKindArb, finishKindArb, handleArb)
  .map(([f1, f2, k]) => finishRace([f1, f2], k));

/**
 * A claim while a finalize runs: the finalize wins exactly as it would
 * alone, and the claim takes only what was claimable before or after it
 * (a lane's next head, a released item), at least what surely was before.
 */
const claimWhileFinishing = (owner: string, limit: number, leaseMs: number, f: Finish, k: number): LedgerCommand => {
  const label = `race(claim(${owner}, limit ${limit}, lease ${ms(leaseMs)}) ‖ ${finishLabel(f)}(h-${k}))`;
  return handleCommand(label, k, async (m, r, h, what) => {
    const sf = scoped(r, f);
    const { value, b } = await bracketed(m, r, () =>
      Promise.all([r.ledger.claim({ queue: r.queue, owner, limit, leaseMs }), finishOn(r.ledger, h, sf)] as const),
    );
    const [claim, fin] = value;
    const before = m.claimable(b);
    expectFinish(fin, m.finish(h, sf, b), what);
    const after = m.claimable(b);
    expectClaim(
      m,
      claim.items,
      { sure: before.sure, maybe: [...before.maybe, ...after.sure, ...after.maybe] },
      limit,
      what,
    );
    for (const c of claim.items) {
      m.claimed(c, leaseMs, b);
      expect(viewOf(c), `${what}: the claimed ${m.label(c.id)} as returned`).toEqual(m.view(m.item(c.id)));
    }
  });
};

export const claimWhileFinishingArb = fc
  .tuple(ownerArb, limitArb, leaseArb, finishKindArb, handleArb)
  .map(([o, l, lease, f, k]) => claimWhileFinishing(o, l, lease, f, k));

/**
 * A block and a wake of its key at once (docs/design/states.md, "a wake is
 * never lost"): whichever commits first, the item ends pending; the wake
 * names it exactly when the block had parked it first.
 */
const blockWhileWaking = (key: string, k: number): LedgerCommand => {
  const label = `race(block(${key})(h-${k}) ‖ wakeDependency(${key}))`;
  return handleCommand(label, k, async (m, r, h, what) => {
    const dep = depKey(r, key);
    const block: Finish = { kind: 'block', key: dep };
    const { value, b } = await bracketed(m, r, () =>
      Promise.all([finishOn(r.ledger, h, block), r.ledger.wakeDependency(dep, { queue: r.queue })] as const),
    );
    const [blocked, woken] = value;
    const wokenLabels = woken.map((w) => m.label(w.id)).sort();
    if (!m.holds(h)) {
      expect(blocked.won, `${what}: won`).toBe(false);
      expect(wokenLabels, `${what}: woke`).toEqual(
        m
          .wake(dep, b)
          .map((id) => m.label(id))
          .sort(),
      );
      return;
    }
    expect(blocked.won, `${what}: won`).toBe(true);
    const parkedFirst = blocked.state === 'blocked';
    expect(
      woken.some((w) => w.id === h.id),
      `${what}: the wake names the item iff the block parked it (block said ${blocked.state})`,
    ).toBe(parkedFirst);
    let want: string[];
    if (parkedFirst) {
      expectFinish(blocked, m.finish(h, block, b), what);
      want = m.wake(dep, b);
    } else {
      want = m.wake(dep, b);
      expectFinish(blocked, m.finish(h, block, b, true), what);
    }
    expect(wokenLabels, `${what}: woke`).toEqual(want.map((id) => m.label(id)).sort());
    expect(m.item(h.id).state, `${what}: the item ends`).toBe('pending');
  });
};

export const blockWhileWakingArb = fc.tuple(depArb, handleArb).map(([key, k]) => blockWhileWaking(key, k));
