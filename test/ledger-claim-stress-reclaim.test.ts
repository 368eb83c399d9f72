import { expect, test } from 'vitest';
import type { ClaimedItem } from '../src/ledger/types.js';
import { conflictsRetriedDuring, ER_LOCK_DEADLOCK, retriesByErrno } from './support/conflicts.js';
import {
  between,
  describeFailures,
  enqueueAll,
  recordRetries,
  rowsOf,
  seedOf,
  serverLabel,
  withLedgers,
  type Failure,
} from './support/claim-stress.js';
import { freshQueue } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { seededRandom } from './support/random.js';
// Claims under contention (see test/support/claim-stress.ts): the reclaim of expiring leases
// against their holders' renewals.

const HOLDERS = 4;
const RECLAIMERS = 3;
const HELD = 48;
const LEASE_MS = 300;
/**
 * The claims' lease: long enough for every holder to have claimed its share before any of them expires (on a
 * loaded machine the claims alone took longer than LEASE_MS, so every steady holder started out expired).
 */
const CLAIM_LEASE_MS = 3_000;
/** A steady holder's renewals: renewed half of it ahead, so a stall of the machine shorter than that keeps it. */
const STEADY_LEASE_MS = 1_500;
const RENEWALS = 6;
/** The last renewal of an item still held: long enough that no reclaim can take it before the test ends. */
const FINAL_LEASE_MS = 120_000;

/** How a holder treats its item: renews well ahead of expiry, renews about when the lease runs out, or never. */
type Habit = 'steady' | 'late' | 'hung';
const HABITS: readonly Habit[] = ['steady', 'late', 'late', 'hung'];

interface Renewal {
  /** The ledger's clock just before and just after the call. */
  before: number;
  after: number;
  renewed: boolean;
  leaseMs: number;
}

test('reclaim against renew: an item is either kept by its holder or ' +
  'reclaimed once, and a reclaimed lease no longer renews', async () => {
  const seed = seedOf();
  const random = seededRandom(seed);
  const note = `seed ${seed}`;
  await withLedgers(HOLDERS + RECLAIMERS, async (tl, ledgers) => {
    const label = await serverLabel(tl.ledger);
    const holders = ledgers.slice(0, HOLDERS);
    const reclaimers = ledgers.slice(HOLDERS);
    const queue = freshQueue('stress-reclaim');
    // Laneless items, and lane heads with an item behind each (a reclaimed head stays its lane's head).
    await enqueueAll(tl.ledger, [
      ...Array.from({ length: HELD / 2 }, (_, k) => ({ queue, type: 't', payload: { k }, maxAttempts: 3 })),
      ...Array.from({ length: HELD }, (_, k) => ({
        queue,
        type: 't',
        payload: { k: HELD + k },
        maxAttempts: 3,
        lane: `R${k % (HELD / 2)}`,
      })),
    ]);
    // Each holder claims its share; the lane heads' successors stay pending behind them.
    const held: { item: ClaimedItem; holder: number; habit: Habit }[] = [];
    for (let h = 0; held.length < HELD; h = (h + 1) % HOLDERS) {
      const { items } = await holders[h]!.claim({
        queue,
        owner: `holder-${h}`,
        limit: Math.min(12, HELD - held.length),
        leaseMs: CLAIM_LEASE_MS,
      });
      expect(items.length, 'claimable items left').toBeGreaterThan(0);
      for (const item of items) held.push({ item, holder: h, habit: HABITS[held.length % HABITS.length]! });
    }
    // The test waits on the ledger's clock, estimated locally (one server on this machine) and read
    // for real around every call.
    const offset = (await tl.ledger.now()).getTime() - Date.now();
    const ledgerNow = (): number => Date.now() + offset;

    const failures: Failure[] = [];
    const renewals = new Map<string, Renewal[]>();
    const reclaims: { by: string; reclaimed: string[]; dead: string[]; cancelled: string[] }[] = [];
    let holding = held.length;

    const reclaiming = Promise.all(
      reclaimers.map(async (ledger, r) => {
        // Until every holder is done, or a call failed (then everyone stops and the test fails).
        while (holding > 0 && failures.length === 0) {
          try {
            const out = await ledger.reclaimExpired({ queue });
            if (out.reclaimed.length + out.dead.length + out.cancelled.length > 0)
              reclaims.push({ by: `reclaimer-${r}`, ...out });
          } catch (error) {
            failures.push({ who: `reclaimer-${r}`, what: 'reclaimExpired', error });
          }
        }
      }),
    );
    const holdersDone = Promise.all(
      held.map(async ({ item, holder, habit }) => {
        const ledger = holders[holder]!;
        const log: Renewal[] = [];
        renewals.set(item.id, log);
        /** The least the lease can run to, by the ledger's clock. */
        let leaseLo = item.leaseUntil.getTime();
        const renew = async (leaseMs: number): Promise<boolean> => {
          const before = (await ledger.now()).getTime();
          const { renewed } = await ledger.renew(item, leaseMs);
          const after = (await ledger.now()).getTime();
          log.push({ before, after, renewed, leaseMs });
          if (renewed) leaseLo = before + leaseMs;
          return renewed;
        };
        try {
          if (habit === 'hung') {
            // Never renews; once the lease has run out and a reclaimer took the item, the old token renews no more.
            await waitFor(
              async () => failures.length > 0 || (await ledger.get(item.id))?.state !== 'processing',
              30_000,
              `the reclaim of ${item.id}`,
            );
            await renew(LEASE_MS);
            return;
          }
          for (let n = 0; n < RENEWALS && failures.length === 0; n++) {
            // steady: half its lease before it runs out; late: within 40 ms of it, either side.
            const at = habit === 'steady' ? leaseLo - STEADY_LEASE_MS / 2 : leaseLo + between(random, -40, 40);
            await waitFor(() => ledgerNow() >= at, 30_000, 'the time to renew');
            if (!(await renew(habit === 'steady' ? STEADY_LEASE_MS : LEASE_MS))) return;
          }
          await renew(FINAL_LEASE_MS);
        } catch (error) {
          failures.push({ who: `holder-${holder}`, what: `renewing ${item.id} (${habit})`, error });
        } finally {
          holding--;
        }
      }),
    );
    const phase = await conflictsRetriedDuring(() => Promise.all([holdersDone, reclaiming]));
    expect(describeFailures(failures), `${note}: calls that failed`).toEqual([]);

    // Reclaimed at most once each, and only back to pending (each had attempts left, none was cancelled).
    const reclaimedBy = new Map<string, string[]>();
    for (const r of reclaims) for (const id of r.reclaimed) reclaimedBy.set(id, [...(reclaimedBy.get(id) ?? []), r.by]);
    expect(
      reclaims.flatMap((r) => [...r.dead, ...r.cancelled]),
      note,
    ).toEqual([]);
    expect(
      [...reclaimedBy].filter(([, by]) => by.length > 1),
      `${note}: reclaimed twice`,
    ).toEqual([]);

    const rows = await rowsOf(tl.ledger, queue);
    const wrong: string[] = [];
    let kept = 0;
    let renewedAfterExpiry = 0;
    for (const { item, holder, habit } of held) {
      const log = renewals.get(item.id) ?? [];
      const what = `${item.id} (${habit}, holder-${holder})`;
      const row = rows.get(item.id);
      const refused = log.findIndex((x) => !x.renewed);
      // A renewal that surely ran before the lease it extended could run out always wins.
      let lo = item.leaseUntil.getTime();
      let hi = item.leaseUntil.getTime();
      for (const [n, x] of log.entries()) {
        if (x.after + 2 < lo && !x.renewed)
          wrong.push(
            `${what}: renewal ${n} ran while its lease was live (until ≥ ${lo}, ended ${x.after}) and was refused`,
          );
        // Won although its lease had surely run out when it began: no reclaimer had got there yet.
        if (x.renewed && x.before > hi + 2) renewedAfterExpiry++;
        if (x.renewed) {
          lo = x.before + x.leaseMs;
          hi = x.after + x.leaseMs;
        }
      }
      if (!reclaimedBy.has(item.id)) {
        // Kept: every renewal won, the last one for long, and it is still processing under its holder's lease.
        kept++;
        if (refused !== -1) wrong.push(`${what}: renewal ${refused} refused, but no reclaimer took it`);
        if (row?.state !== 'processing' || row.lease_token !== item.leaseToken || row.attempt !== 1) {
          wrong.push(
            `${what}: never reclaimed, but ${row?.state} under ` +
              `${row?.lease_owner}/${row?.lease_token}, attempt ${row?.attempt}`,
          );
        }
        continue;
      }
      // Reclaimed: the ledger's history says when; the lease had run out by then, renewed or not.
      const attempts = (await tl.ledger.inspect(item.id))?.attempts ?? [];
      const expiry = attempts.filter((a) => a.outcome === 'lease_expired');
      if (expiry.length !== 1 || expiry[0]?.attempt !== 1 || expiry[0]?.worker !== `holder-${holder}`) {
        wrong.push(
          `${what}: reclaimed, but its history is ` +
            `${JSON.stringify(attempts.map((a) => [a.attempt, a.outcome, a.worker]))}`,
        );
        continue;
      }
      const reclaimedAt = expiry[0].endedAt.getTime();
      if (reclaimedAt + 2 < item.leaseUntil.getTime())
        wrong.push(
          `${what}: reclaimed at ${reclaimedAt}, before its claim's lease ran out at ${item.leaseUntil.getTime()}`,
        );
      for (const [n, x] of log.entries()) {
        // A renewal that won extended the lease to at least `before + leaseMs`: no reclaim before that.
        if (x.renewed && reclaimedAt + 2 < x.before + x.leaseMs)
          wrong.push(
            `${what}: renewal ${n} won (lease ≥ ${x.before + x.leaseMs}) but it was reclaimed at ${reclaimedAt}`,
          );
        // After the reclaim, the old token renews no more.
        if (x.before > reclaimedAt + 2 && x.renewed)
          wrong.push(`${what}: renewal ${n} at ${x.before} won after the reclaim at ${reclaimedAt}`);
      }
      if (refused === -1) wrong.push(`${what}: reclaimed at ${reclaimedAt}, but its holder's every renewal won`);
      if (row?.state !== 'pending' || row.attempt !== 1)
        wrong.push(`${what}: reclaimed, but ${row?.state} at attempt ${row?.attempt}`);
      const again = await holders[holder]!.renew(item, LEASE_MS);
      if (again.renewed) wrong.push(`${what}: its old lease renewed after the reclaim`);
    }
    recordRetries(label, 'reclaim-vs-renew', 'run', phase, () => ({
      kept,
      reclaimed: reclaimedBy.size,
      lateReclaimed: held.filter((h) => h.habit === 'late' && reclaimedBy.has(h.item.id)).length,
      renewedAfterExpiry,
    }));
    expect(wrong.slice(0, 10), `${note}: renewals and reclaims`).toEqual([]);
    // Both outcomes happened: every hung holder lost its item, some holders kept theirs.
    expect(
      held.filter((h) => h.habit === 'hung').every((h) => reclaimedBy.has(h.item.id)),
      note,
    ).toBe(true);
    expect(kept, `${note}: items kept by their holders`).toBeGreaterThan(0);
    if (label.family === 'mariadb') {
      expect(retriesByErrno(phase.retried), `${note}: conflicts retried`).not.toHaveProperty(String(ER_LOCK_DEADLOCK));
    }
  });
}, 120_000);
