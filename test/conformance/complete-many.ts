import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { expect } from 'vitest';
import { reached } from '../support/ledger-clock.js';
import type { ModelItem } from '../support/ledger-model.js';
import { handleNote, leaseArb, ms } from './commands.js';
import { bracketed, command, recent, viewOf, type LedgerCommand } from './real.js';

/**
 * completeMany, the consumer's batched completion (docs/design/consumer.md): each
 * entry is still a CAS on its own token, a stale one loses alone, laned
 * winners hand their lanes on in the same transaction and, given `next`,
 * up to `next.max` of the new heads that are due are claimed under its lease.
 */
const completeMany = (ks: readonly number[], next: { max: number; leaseMs: number } | null): LedgerCommand => {
  const claimNext = next ? `; claim next: max ${next.max}, lease ${ms(next.leaseMs)}` : '';
  const label = `completeMany(${ks.map((k) => `h-${k}`).join(', ')}${claimNext})`;
  return command(
    label,
    (m) => m.handles.length > Math.max(...ks),
    async (m, r) => {
      const handles = ks.map((k) => recent(m, k));
      const what = `${label}, ${ks.map((k) => handleNote(m, k)).join('; ')}`;
      const successor = next
        ? { owner: 'w-next', token: randomBytes(16).toString('base64url'), leaseMs: next.leaseMs, max: next.max }
        : undefined;
      const headsBefore = m.pendingHeads();
      const { value, b } = await bracketed(m, r, () =>
        r.ledger.completeManyClaimingNext(
          handles.map((handle) => ({ handle })),
          successor,
        ),
      );
      expect(value.results, `${what}: one result per entry`).toHaveLength(handles.length);
      handles.forEach((h, k) => {
        const got = value.results[k];
        const want = m.finish(h, { kind: 'complete' }, b);
        expect(got?.won, `${what}: entry ${k} (${m.label(h.id)}) won`).toBe(want.won);
        expect(got?.state, `${what}: entry ${k} state`).toBe('completed');
        expect(
          got !== undefined && 'laneAdvanced' in got,
          `${what}: entry ${k} says whether its lane advanced iff laned`,
        ).toBe(h.lane !== null);
      });
      const fresh = [...m.pendingHeads()].filter((id) => !headsBefore.has(id)).map((id) => m.item(id));
      const due = (i: ModelItem): boolean => reached(i.runAfter, b) !== 'no';
      const took = value.claimed;
      const allowed = new Set(fresh.filter(due).map((i) => i.id));
      expect(took.length, `${what}: successors claimed`).toBeLessThanOrEqual(successor?.max ?? 0);
      for (const c of took) {
        expect(allowed.has(c.id), `${what}: claimed ${m.label(c.id)}, not a due new head`).toBe(true);
        expect(c.leaseToken, `${what}: ${m.label(c.id)} under the successor lease`).toBe(successor?.token);
      }
      // A winner whose lane now has a pending new head (not claimed with it) says its lane advanced.
      handles.forEach((h, k) => {
        const got = value.results[k];
        if (!got?.won || h.lane === null) return;
        const head = fresh.find((i) => i.lane === h.lane && !took.some((c) => c.id === i.id));
        if (head)
          expect(got.laneAdvanced, `${what}: entry ${k}: lane ${h.lane} advanced to ${m.label(head.id)}`).toBe(true);
      });
      for (const c of took) {
        m.claimed(c, successor?.leaseMs ?? 0, b);
        expect(viewOf(c), `${what}: the successor ${m.label(c.id)} as returned`).toEqual(m.view(m.item(c.id)));
      }
    },
  );
};

export const completeManyArb = fc
  .tuple(
    fc.uniqueArray(fc.nat({ max: 3 }), { minLength: 1, maxLength: 3 }),
    fc.option(fc.record({ max: fc.integer({ min: 0, max: 2 }), leaseMs: leaseArb }), { nil: null }),
  )
  .map(([ks, next]) => completeMany(ks, next));
