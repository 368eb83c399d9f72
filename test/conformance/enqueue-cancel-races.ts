import fc from 'fast-check';
import { expect } from 'vitest';
import type { EnqueueResult } from '../../src/ledger/types.js';
import type { Finish, NewItemSpec } from '../support/ledger-model.js';
import {
  enqueueInput,
  finishKindArb,
  handleArb,
  handleCommand,
  leaseArb,
  limitArb,
  MAX_ITEMS,
  ms,
  newItemArb,
  ownerArb,
  scoped,
  specLabel,
  withKeyLane,
} from './commands.js';
import {
  bracketed,
  command,
  expectClaim,
  expectFinish,
  finishLabel,
  finishOn,
  viewOf,
  type LedgerCommand,
} from './real.js';

/*
 * More calls issued together (see races.ts): producers against each other
 * and against a lane's head ending, and an operator's cancel against a claim
 * or the holder's finalize. The answers tell which went first; the model
 * then checks that order's outcome.
 */

/**
 * Two enqueues at once: one key gives one item (the other answer a
 * duplicate of it), one lane gives consecutive places, and an enqueue
 * racing another into an idle lane leaves exactly one head.
 */
const enqueueRace = (specs: [NewItemSpec, NewItemSpec]): LedgerCommand => {
  const label = `race(enqueue[${specLabel(specs[0])}] ‖ enqueue[${specLabel(specs[1])}])`;
  return command(
    label,
    (m) => m.items.length < MAX_ITEMS,
    async (m, r) => {
      const { value, b } = await bracketed(m, r, () =>
        Promise.all(specs.map((s) => r.ledger.enqueue(enqueueInput(r, s)))),
      );
      const [a, c] = value;
      if (!a || !c) throw new Error(`${label}: missing answers`);
      const sameKey = specs[0].key !== null && specs[0].key === specs[1].key;
      if (sameKey) expect(c.id, `${label}: one key, one item`).toBe(a.id);
      // The order the ledger took them in: the fresh one of a key first, else the lower place in a shared lane.
      const secondFirst =
        (sameKey && c.duplicate === false) ||
        (!sameKey &&
          !a.duplicate &&
          !c.duplicate &&
          specs[0].lane !== null &&
          specs[0].lane === specs[1].lane &&
          (c.laneSeq ?? 0) < (a.laneSeq ?? 0));
      const order: [NewItemSpec, EnqueueResult, number][] = secondFirst
        ? [
            [specs[1], c, 1],
            [specs[0], a, 0],
          ]
        : [
            [specs[0], a, 0],
            [specs[1], c, 1],
          ];
      for (const [spec, got, k] of order) expect(got, `${label}: enqueue ${k}`).toEqual(m.enqueue(spec, got.id, b));
    },
  );
};

export const enqueueRaceArb = fc
  .tuple(newItemArb, newItemArb, fc.boolean())
  // Half the time the same key, so the two really contend for it.
  .map(([s1, s2, sameKey]) => enqueueRace([s1, sameKey ? withKeyLane({ ...s2, key: s1.key ?? 'k0' }) : s2]));

/**
 * An enqueue while a finalize ends (or hands back) a head of the same lane:
 * whichever commits first, the lane keeps exactly one head, and the new item
 * is it only if nothing else of the lane is left unfinished.
 */
const enqueueWhileFinishing = (spec: NewItemSpec, f: Finish, k: number): LedgerCommand => {
  const label = `race(enqueue[${specLabel(spec)}] ‖ ${finishLabel(f)}(h-${k}))`;
  return handleCommand(
    label,
    k,
    async (m, r, h, what) => {
      // Into the finalized item's lane, when it has one: that is where the two meet (a keyed
      // item keeps its key's lane).
      const s: NewItemSpec = spec.key === null ? { ...spec, lane: h.lane ?? spec.lane } : spec;
      const sf = scoped(r, f);
      const { value, b } = await bracketed(m, r, () =>
        Promise.all([r.ledger.enqueue(enqueueInput(r, s)), finishOn(r.ledger, h, sf)] as const),
      );
      const [enq, fin] = value;
      // Either order ends the same way (the lane row orders them): finalize, then enqueue.
      expectFinish(fin, m.finish(h, sf, b), what);
      expect(enq, `${what}: enqueue`).toEqual(m.enqueue(s, enq.id, b));
    },
    (m) => m.items.length < MAX_ITEMS,
  );
};

export const enqueueWhileFinishingArb = fc
  .tuple(newItemArb, finishKindArb, handleArb)
  .map(([s, f, k]) => enqueueWhileFinishing(s, f, k));

/**
 * An operator cancels a pending item while a claim runs: either the cancel
 * ends it first (the claim never gets it; its lane may move on to a head the
 * claim can take) or the claim takes it and the cancel becomes a request.
 */
const cancelWhileClaiming = (n: number, owner: string, limit: number, leaseMs: number): LedgerCommand => {
  const label = `race(cancel(pending #${n}) ‖ claim(${owner}, limit ${limit}, lease ${ms(leaseMs)}))`;
  return command(
    label,
    (m) => m.inState(['pending']).length > n,
    async (m, r) => {
      const item = m.inState(['pending'])[n];
      if (!item) throw new Error(`${label}: no such item`);
      const what = `${label} of ${m.label(item.id)}`;
      const { value, b } = await bracketed(m, r, () =>
        Promise.all([r.ledger.cancel(item.id), r.ledger.claim({ queue: r.queue, owner, limit, leaseMs })] as const),
      );
      const [cancelled, claim] = value;
      const before = m.claimable(b);
      const took = claim.items.some((c) => c.id === item.id);
      expect(took, `${what}: the claim took it iff the cancel became a request (cancel said ${cancelled})`).toBe(
        cancelled === 'cancel_requested',
      );
      const record = (): void => {
        for (const c of claim.items) {
          m.claimed(c, leaseMs, b);
          const want = m.view(m.item(c.id));
          // The claim's read-back may already see the cancel's reason (it commits between the
          // claim's CAS and its read).
          if (c.id === item.id && c.lastError === 'cancel requested') want.lastError = c.lastError;
          expect(viewOf(c), `${what}: the claimed ${m.label(c.id)} as returned`).toEqual(want);
        }
      };
      if (took) {
        expectClaim(m, claim.items, before, limit, what);
        record();
        expect(cancelled, `${what}: cancel`).toBe(m.cancel(item.id, undefined));
      } else {
        expect(cancelled, `${what}: cancel`).toBe(m.cancel(item.id, undefined));
        const after = m.claimable(b);
        const others = {
          sure: before.sure.filter((i) => i.id !== item.id),
          maybe: [...before.maybe, ...after.sure, ...after.maybe].filter((i) => i.id !== item.id),
        };
        expectClaim(m, claim.items, others, limit, what, 1);
        record();
      }
    },
  );
};

export const cancelWhileClaimingArb = fc
  .tuple(fc.nat({ max: 1 }), ownerArb, limitArb, leaseArb)
  .map(([n, o, l, lease]) => cancelWhileClaiming(n, o, l, lease));

/**
 * An operator cancels the item its holder is finalizing: the holder's CAS
 * wins all the same (a cancel never takes a running item away); the cancel
 * is a request if it came first, else it acts on what the finalize left.
 */
const cancelWhileFinishing = (f: Finish, k: number, reason: string | undefined): LedgerCommand => {
  const label = `race(cancel(h-${k}'s item${reason ? `, "${reason}"` : ''}) ‖ ${finishLabel(f)}(h-${k}))`;
  return handleCommand(label, k, async (m, r, h, what) => {
    const sf = scoped(r, f);
    const held = m.holds(h);
    const { value, b } = await bracketed(m, r, () =>
      Promise.all([r.ledger.cancel(h.id, reason), finishOn(r.ledger, h, sf)] as const),
    );
    const [cancelled, fin] = value;
    if (held && cancelled === 'cancel_requested') {
      expect(m.cancel(h.id, reason), `${what}: cancel`).toBe('cancel_requested');
      expectFinish(fin, m.finish(h, sf, b), what);
    } else {
      expectFinish(fin, m.finish(h, sf, b), what);
      expect(cancelled, `${what}: cancel`).toBe(m.cancel(h.id, reason));
    }
  });
};

export const cancelWhileFinishingArb = fc
  .tuple(finishKindArb, handleArb, fc.constantFrom(undefined, 'operator says no'))
  .map(([f, k, reason]) => cancelWhileFinishing(f, k, reason));
