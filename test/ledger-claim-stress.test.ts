import { appendFileSync } from 'node:fs';
import { sql } from 'kysely';
import { expect, test } from 'vitest';
import { newLeaseToken } from '../src/ledger/ids.js';
import { Ledger, type EnqueueInput } from '../src/ledger/ledger.js';
import type { ClaimedItem, FinalizeResult } from '../src/ledger/types.js';
import { addRetries, conflictsRetriedDuring, ER_LOCK_DEADLOCK, retriesByErrno } from './support/conflicts.js';
import { freshQueue, historyCount } from './support/items.js';
import { createTestLedger, testTxnMode, waitFor, type TestLedger } from './support/ledger.js';
import { seededRandom } from './support/random.js';

/*
 * Claims under contention, on whatever server the suite targets (docs/design.md §3, §8): many ledgers (each its
 * own pool, so their statements really overlap on separate connections) claim over one overlapping candidate
 * set, over tiny queues burst after burst, against laned completions that hand their lane on, and against
 * the reclaim of expiring leases. None of them may see an error, and every item is won by exactly one of them.
 *
 * A deadlock is no error to a caller (the ledger runs its victim again), so the conflicts the ledger retried
 * (conflictRetries, by errno) are read around each phase: on MariaDB two claims lock their rows in primary-key
 * order and cannot deadlock (nor, by the lock order of §8, do claims and completions), so no phase may retry a
 * 1213 at all. On TiDB (optimistic mode above all) a write conflict may be retried legitimately; there only
 * errors and exactly-once are checked. Only the tiny-queue test reaches the plan that deadlocked (see there):
 * without FORCE INDEX it retries 1213s and fails, and on 6495dec its claims throw them.
 *
 * Every test makes its own database. Randomness comes from one seed per test (LANEWAKE_STRESS_SEED repeats it;
 * a failure names it), though the servers' interleaving is never the same twice. With
 * LANEWAKE_STRESS_RETRIES_FILE set, each phase's retried conflicts (and how long it took, and what it did) are
 * appended there as a JSON line.
 */

function seedOf(): number {
  const fixed = process.env.LANEWAKE_STRESS_SEED;
  return fixed !== undefined && fixed !== '' ? Number(fixed) : Math.floor(Math.random() * 2 ** 31);
}

/** An integer in [lo, hi]. */
const between = (random: () => number, lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1));

/** `n` distinct elements of `from`, in random order. */
function sample<T>(random: () => number, from: readonly T[], n: number): T[] {
  const copy = [...from];
  const out: T[] = [];
  while (out.length < n && copy.length > 0) out.push(...copy.splice(Math.floor(random() * copy.length), 1));
  return out;
}

/** A database of its own and `count` more ledgers on it, each with its own small pool; all closed and dropped after. */
async function withLedgers<T>(count: number, fn: (tl: TestLedger, ledgers: Ledger[]) => Promise<T>): Promise<T> {
  const tl = await createTestLedger();
  const ledgers = Array.from({ length: count }, () => new Ledger({ url: tl.url, poolSize: 2, ...testTxnMode() }));
  try {
    return await fn(tl, ledgers);
  } finally {
    await Promise.allSettled(ledgers.map((l) => l.close()));
    await tl.drop();
  }
}

async function enqueueAll(ledger: Ledger, inputs: readonly EnqueueInput[]): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < inputs.length; i += 500) ids.push(...(await ledger.enqueueMany(inputs.slice(i, i + 500))).map((r) => r.id));
  return ids;
}

/** A call that failed: which caller, doing what. Collected, never thrown mid-run, so every caller runs to the end. */
interface Failure {
  who: string;
  what: string;
  error: unknown;
}

function describeFailures(failures: readonly Failure[]): string[] {
  return failures.slice(0, 10).map((f) => `${f.who} ${f.what}: ${f.error instanceof Error ? (f.error.stack ?? f.error.message) : String(f.error)}`);
}

/** The server family and, on TiDB, the transaction mode the suite runs (for the retries file). */
async function serverLabel(ledger: Ledger): Promise<{ family: string; mode: string }> {
  const family = (await ledger.capabilities()).family;
  return { family, mode: family === 'tidb' ? (testTxnMode().tidbTxnMode ?? 'pessimistic') : '-' };
}

function recordRetries(
  label: { family: string; mode: string },
  testName: string,
  phase: string,
  measured: { retried: ReadonlyMap<number, number>; ms: number },
  counts: () => Record<string, number> = () => ({}),
): void {
  const file = process.env.LANEWAKE_STRESS_RETRIES_FILE;
  if (file === undefined || file === '') return;
  appendFileSync(file, `${JSON.stringify({ test: testName, phase, ...label, ms: measured.ms, retried: retriesByErrno(measured.retried), ...counts() })}\n`);
}

/** Who won an item, and with which claim. */
interface Win {
  who: string;
  /** Which call handed it out. */
  how: 'claim' | 'claimByIds' | 'with a completion';
  token: string;
  attempt: number;
  item: ClaimedItem;
}

/** Records wins; an id won twice (by anyone, in any phase) is kept aside as a duplicate. */
class Wins {
  readonly byId = new Map<string, Win>();
  readonly duplicates: string[] = [];

  add(who: string, items: readonly ClaimedItem[], how: Win['how'] = 'claim'): void {
    for (const item of items) {
      const earlier = this.byId.get(item.id);
      if (earlier !== undefined) {
        this.duplicates.push(`${item.id}: won by ${earlier.who} (attempt ${earlier.attempt}) and by ${who} (attempt ${item.attempt})`);
        continue;
      }
      this.byId.set(item.id, { who, how, token: item.leaseToken, attempt: item.attempt, item });
    }
  }
}

/** The queue's rows as the ledger has them now. */
async function rowsOf(ledger: Ledger, queue: string) {
  const r = await sql<{ id: string; state: string; lease_token: string | null; lease_owner: string | null; attempt: number }>`SELECT id, state,
      lease_token, lease_owner, attempt FROM ${ledger.tables.items} WHERE queue = ${queue}`.execute(ledger.db);
  return new Map(r.rows.map((row) => [row.id, { ...row, attempt: Number(row.attempt) }]));
}

const CLAIMERS = 16;
const ROUNDS = 200;
/**
 * 1,100 items, 860 of them claimable during the rounds (the laneless ones and each lane's head): the first
 * rounds contend over a wide candidate set, the middle ones over the few heads left (the tiny queue the
 * deadlock needed), the last ones over items already held. Every concurrent claim wants the same earliest
 * due heads, so on TiDB each collision is a lock wait: there the rounds take 10-25 s on a shared 2-core machine
 * (with a backlog of 3,000, 106 s). Short lanes keep the drain short.
 */
const LANELESS = 800;
const SHARED_LANES = 60;
const PER_LANE = 5;

test('16 claimers, 200 rounds each of claim and claimByIds over one candidate set: no errors, every item won exactly once', async () => {
  const seed = seedOf();
  const random = seededRandom(seed);
  const note = `seed ${seed}`;
  await withLedgers(CLAIMERS, async (tl, claimers) => {
    const label = await serverLabel(tl.ledger);
    const queue = freshQueue('stress-claim');
    // Laneless items and shared lanes interleaved, in three priorities.
    const inputs: EnqueueInput[] = [
      ...Array.from({ length: LANELESS }, (_, k) => ({ queue, type: 't', payload: { k }, priority: between(random, 0, 2) })),
      ...Array.from({ length: SHARED_LANES * PER_LANE }, (_, k) => ({
        queue,
        type: 't',
        payload: { k: LANELESS + k },
        priority: between(random, 0, 2),
        lane: `lane-${k % SHARED_LANES}`,
      })),
    ];
    const shuffled = sample(random, inputs, inputs.length);
    const ids = await enqueueAll(tl.ledger, shuffled);
    const total = ids.length;
    // The order claims take them in (priority, then due time; a batch shares its due time): claimByIds names
    // ids near the front of it, where claim()'s picks are too, so the two kinds of claim overlap.
    const claimOrder = ids.map((id, k) => ({ id, k, p: shuffled[k]!.priority ?? 0 })).sort((a, b) => a.p - b.p || a.k - b.k).map((x) => x.id);

    const wins = new Wins();
    const failures: Failure[] = [];
    let front = 0;
    /** Up to `n` ids near the front of the claim order that no one is known to have won yet, and now and then any id. */
    const idsToName = (n: number): string[] => {
      while (front < claimOrder.length && wins.byId.has(claimOrder[front]!)) front++;
      const window: string[] = [];
      for (let i = front; i < claimOrder.length && window.length < 32; i++) if (!wins.byId.has(claimOrder[i]!)) window.push(claimOrder[i]!);
      const named = sample(random, window, n);
      if (random() < 0.3) {
        const any = ids[Math.floor(random() * ids.length)]!;
        if (!named.includes(any)) named.push(any);
      }
      return named;
    };
    let claimCalls = 0;
    let byIdCalls = 0;
    const rounds = await conflictsRetriedDuring(() =>
      Promise.all(
        claimers.map(async (ledger, c) => {
          const owner = `claimer-${c}`;
          for (let round = 0; round < ROUNDS; round++) {
            const byIds = random() < 0.5;
            const limit = between(random, 1, 8);
            const named = byIds ? idsToName(limit) : [];
            try {
              if (byIds) {
                byIdCalls++;
                wins.add(owner, await ledger.claimByIds({ queue, owner, ids: named, leaseMs: 600_000 }), 'claimByIds');
              } else {
                claimCalls++;
                wins.add(owner, (await ledger.claim({ queue, owner, limit, leaseMs: 600_000 })).items);
              }
            } catch (error) {
              failures.push({ who: owner, what: `round ${round} ${byIds ? `claimByIds(${named.length} ids)` : `claim(limit ${limit})`}`, error });
            }
          }
        }),
      ),
    );
    recordRetries(label, 'claim-vs-claimByIds', 'rounds', rounds, () => ({
      won: wins.byId.size,
      wonByClaimByIds: [...wins.byId.values()].filter((w) => w.how === 'claimByIds').length,
      calls: claimCalls + byIdCalls,
    }));
    expect(describeFailures(failures), `${note}: calls that failed`).toEqual([]);
    expect(wins.duplicates, `${note}: items won twice`).toEqual([]);
    expect(claimCalls + byIdCalls).toBe(CLAIMERS * ROUNDS);
    // The rounds took most of the backlog, and both kinds of claim won some of it.
    expect(wins.byId.size, `${note}: items the rounds won`).toBeGreaterThan(LANELESS / 2);
    const byIdsWon = [...wins.byId.values()].filter((w) => w.how === 'claimByIds').length;
    expect(byIdsWon, `${note}: items claimByIds won`).toBeGreaterThan(0);
    expect(byIdsWon, `${note}: items claimByIds won`).toBeLessThan(wins.byId.size);
    for (const [id, w] of wins.byId) {
      expect(w.item, `${note}: ${id} as its claim returned it`).toMatchObject({ state: 'processing', attempt: 1, leaseOwner: w.who });
    }
    // The ledger agrees: each item won is processing under its winner's lease, attempt 1; the others wait untouched.
    const rows = await rowsOf(tl.ledger, queue);
    expect(rows.size).toBe(total);
    const wrong: string[] = [];
    for (const [id, row] of rows) {
      const w = wins.byId.get(id);
      if (w !== undefined) {
        if (row.state !== 'processing' || row.lease_token !== w.token || row.lease_owner !== w.who || row.attempt !== 1) {
          wrong.push(`${id} won by ${w.who}: ${row.state} under ${row.lease_owner}/${row.lease_token}, attempt ${row.attempt}`);
        }
      } else if (row.state !== 'pending' || row.attempt !== 0) {
        wrong.push(`${id} won by no one: ${row.state} under ${row.lease_owner}, attempt ${row.attempt}`);
      }
    }
    expect(wrong.slice(0, 10), `${note}: items the ledger has otherwise than the claims said`).toEqual([]);
    if (label.family === 'mariadb') {
      expect(retriesByErrno(rounds.retried), `${note}: conflicts the claims retried`).not.toHaveProperty(String(ER_LOCK_DEADLOCK));
    }

    // Drain: each claimer completes what it won, taking each lane's next item with the completion (lane
    // affinity), then claims and completes until every item is done.
    let completed = 0;
    const lost: string[] = [];
    const deadline = Date.now() + 120_000;
    const drain = await conflictsRetriedDuring(() =>
      Promise.all(
        claimers.map(async (ledger, c) => {
          const owner = `drain-${c}`;
          const held = [...wins.byId.values()].filter((w) => w.who === `claimer-${c}`).map((w) => w.item);
          try {
            while (completed + lost.length < total && failures.length === 0) {
              if (held.length > 0) {
                const batch = held.splice(0, 50);
                const next = { owner, token: newLeaseToken(), leaseMs: 600_000, max: 50 };
                const { results, claimed } = await ledger.completeManyClaimingNext(batch.map((handle) => ({ handle })), next);
                results.forEach((r, k) => (r.won ? completed++ : lost.push(`${owner}'s completion of ${batch[k]!.id}`)));
                wins.add(owner, claimed, 'with a completion');
                held.push(...claimed);
                continue;
              }
              const seen = completed;
              const { items } = await ledger.claim({ queue, owner, limit: 32, leaseMs: 600_000 });
              wins.add(owner, items);
              held.push(...items);
              // Nothing claimable now: what is left waits behind lane heads that others hold and will complete.
              if (items.length === 0) {
                await waitFor(() => completed !== seen || completed + lost.length >= total || failures.length > 0, deadline - Date.now(), 'the drain to move on');
              }
            }
          } catch (error) {
            failures.push({ who: owner, what: 'drain', error });
          }
        }),
      ),
    );
    recordRetries(label, 'claim-vs-claimByIds', 'drain', drain);
    expect(describeFailures(failures), `${note}: calls that failed in the drain`).toEqual([]);
    expect(lost, `${note}: completions lost`).toEqual([]);
    expect(wins.duplicates, `${note}: items won twice`).toEqual([]);
    // Every item of the backlog was won exactly once overall, at its first attempt, and completed.
    expect(wins.byId.size, note).toBe(total);
    expect([...wins.byId.keys()].sort()).toEqual([...ids].sort());
    expect([...wins.byId.values()].filter((w) => w.attempt !== 1).map((w) => w.item.id), `${note}: won at another attempt`).toEqual([]);
    const [stats] = await tl.ledger.stats(queue);
    expect(stats?.counts, note).toEqual({ pending: 0, processing: 0, blocked: 0, completed: total, skipped: 0, dead: 0, cancelled: 0 });
    const after = await rowsOf(tl.ledger, queue);
    expect([...after.values()].filter((r) => r.attempt !== 1).length, `${note}: items not completed at attempt 1`).toBe(0);
    expect(await historyCount(tl.ledger), `${note}: history rows (first-try completions write none)`).toBe(0);
    // Nor did the drain's claims and laned completions deadlock each other (docs/design.md §8, lock order).
    if (label.family === 'mariadb') {
      expect(retriesByErrno(drain.retried), `${note}: conflicts the drain retried`).not.toHaveProperty(String(ER_LOCK_DEADLOCK));
    }
  });
}, 180_000);

/**
 * The deadlock needed a queue with no more rows than a claim names ids: only then did MariaDB plan the CAS
 * through an index on `queue` (ix_created) instead of the primary key, while a claim naming fewer went by
 * primary key. A queue with a backlog never qualifies (the test above passes on a ledger without FORCE INDEX,
 * with no deadlock to retry), nor does one with a row no claim can name (a lane's second item), nor rows
 * enqueued in one batch (see below). So this one races all sixteen claimers, claim and claimByIds mixed, over
 * queues of four heads each, burst after burst.
 */
const BURSTS = 100;

test('16 claimers at once over tiny queues, burst after burst: no errors, no deadlock retried, each item won exactly once', async () => {
  const seed = seedOf();
  const random = seededRandom(seed);
  const note = `seed ${seed}`;
  await withLedgers(CLAIMERS, async (tl, claimers) => {
    const label = await serverLabel(tl.ledger);
    const failures: Failure[] = [];
    const wrong: string[] = [];
    const retried = new Map<number, number>();
    let won = 0;
    let wonByIds = 0;
    let ms = 0;
    for (let burst = 0; burst < BURSTS && failures.length === 0; burst++) {
      const queue = freshQueue('stress-tiny');
      // Laneless items and lane heads, of two priorities: every row of the queue is claimable.
      const specs: Omit<EnqueueInput, 'queue' | 'type' | 'payload'>[] = [{}, { priority: 1 }, { lane: 'a' }, { lane: 'b', priority: 1 }];
      // One by one: rows of one batch share their creation time, and then ix_created orders them by primary
      // key after all; created apart, its order and the primary key's differ, as they did when it deadlocked.
      const ids: string[] = [];
      for (const [k, spec] of sample(random, specs, specs.length).entries()) ids.push((await tl.ledger.enqueue({ queue, type: 't', payload: { burst, k }, ...spec })).id);
      const wins = new Wins();
      const calls = claimers.map(() => {
        const byIds = random() < 0.5;
        return byIds ? { byIds, ids: sample(random, ids, between(random, 1, ids.length)), limit: 0 } : { byIds, ids: [], limit: between(random, 1, 8) };
      });
      const measured = await conflictsRetriedDuring(() =>
        Promise.all(
          claimers.map(async (ledger, c) => {
            const owner = `claimer-${c}`;
            const call = calls[c]!;
            try {
              if (call.byIds) wins.add(owner, await ledger.claimByIds({ queue, owner, ids: call.ids, leaseMs: 600_000 }), 'claimByIds');
              else wins.add(owner, (await ledger.claim({ queue, owner, limit: call.limit, leaseMs: 600_000 })).items);
            } catch (error) {
              failures.push({ who: owner, what: `burst ${burst} ${call.byIds ? `claimByIds(${call.ids.length} of ${ids.length} ids)` : `claim(limit ${call.limit})`}`, error });
            }
          }),
        ),
      );
      addRetries(retried, measured.retried);
      ms += measured.ms;
      wrong.push(...wins.duplicates.map((d) => `burst ${burst}: ${d}`));
      won += wins.byId.size;
      wonByIds += [...wins.byId.values()].filter((w) => w.how === 'claimByIds').length;
      // Sixteen claims, each of at least one of these heads: every head is won by one of them.
      if (wins.byId.size !== ids.length) wrong.push(`burst ${burst}: sixteen claims won ${wins.byId.size} of ${ids.length} heads`);
      // The ledger agrees: what was won is processing under its winner's lease, the rest waits untouched.
      for (const [id, row] of await rowsOf(tl.ledger, queue)) {
        const w = wins.byId.get(id);
        const ok = w !== undefined ? row.state === 'processing' && row.lease_token === w.token && row.attempt === 1 : row.state === 'pending' && row.attempt === 0;
        if (!ok) wrong.push(`burst ${burst}: ${id} ${w ? `won by ${w.who}` : 'won by no one'}, but ${row.state} under ${row.lease_owner}, attempt ${row.attempt}`);
      }
    }
    recordRetries(label, 'tiny-queues', 'bursts', { retried, ms }, () => ({ won, wonByIds }));
    expect(describeFailures(failures), `${note}: calls that failed`).toEqual([]);
    expect(wrong.slice(0, 10), `${note}: items won twice, or otherwise in the ledger`).toEqual([]);
    expect(wonByIds, `${note}: items claimByIds won`).toBeGreaterThan(0);
    expect(wonByIds, `${note}: items claimByIds won`).toBeLessThan(won);
    if (label.family === 'mariadb') {
      expect(retriesByErrno(retried), `${note}: conflicts the claims retried`).not.toHaveProperty(String(ER_LOCK_DEADLOCK));
    }
  });
}, 120_000);

const LANED_CLAIMERS = 8;
const COMPLETERS = 8;
const LANES = 24;
const LANE_ITEMS = 12;
const LANELESS_AMONG = 96;

test('claims against laned completions that hand each lane to its successor: no errors, one head per lane in lane order, exactly once', async () => {
  const seed = seedOf();
  const random = seededRandom(seed);
  const note = `seed ${seed}`;
  await withLedgers(LANED_CLAIMERS + COMPLETERS, async (tl, ledgers) => {
    const label = await serverLabel(tl.ledger);
    const claimers = ledgers.slice(0, LANED_CLAIMERS);
    const completers = ledgers.slice(LANED_CLAIMERS);
    const queue = freshQueue('stress-laned');
    const inputs: EnqueueInput[] = sample(
      random,
      [
        ...Array.from({ length: LANES * LANE_ITEMS }, (_, k) => ({ queue, type: 't', payload: { k }, priority: between(random, 0, 1), lane: `L${k % LANES}` })),
        ...Array.from({ length: LANELESS_AMONG }, (_, k) => ({ queue, type: 't', payload: { k: -1 - k }, priority: between(random, 0, 1) })),
      ],
      LANES * LANE_ITEMS + LANELESS_AMONG,
    );
    const ids = await enqueueAll(tl.ledger, inputs);
    const total = ids.length;

    const wins = new Wins();
    const failures: Failure[] = [];
    /** Each lane's items in the order they were handed out (a claim's or a completion's answer). */
    const laneOrder = new Map<string, number[]>();
    const handedOut = (who: string, items: readonly ClaimedItem[], how: Win['how']): void => {
      wins.add(who, items, how);
      for (const i of items) if (i.lane !== null) laneOrder.set(i.lane, [...(laneOrder.get(i.lane) ?? []), i.laneSeq ?? -1]);
    };
    /** Claimed items waiting for a completer. */
    const work: ClaimedItem[] = [];
    let completed = 0;
    let successorsClaimed = 0;
    const lost: string[] = [];
    const laneViolations: string[] = [];
    let laneChecks = 0;
    const done = (): boolean => completed + lost.length >= total || failures.length > 0;
    const deadline = Date.now() + 120_000;

    /** One statement, one snapshot: per lane at most one item processing, exactly one head while it has unfinished items, and that head its earliest. */
    const checkLanes = async (ledger: Ledger, when: string): Promise<void> => {
      const r = await sql<{ lane: string; processing: number | string; heads: number | string; earliest: number | string | null; head: number | string | null }>`
        SELECT lane, SUM(state = 'processing') AS processing,
          SUM(is_head = 1 AND state IN ('pending', 'processing', 'blocked')) AS heads,
          MIN(CASE WHEN state IN ('pending', 'processing', 'blocked') THEN lane_seq END) AS earliest,
          MIN(CASE WHEN is_head = 1 AND state IN ('pending', 'processing', 'blocked') THEN lane_seq END) AS head
        FROM ${ledger.tables.items} WHERE queue = ${queue} AND lane IS NOT NULL GROUP BY lane`.execute(ledger.db);
      for (const row of r.rows) {
        const unfinished = row.earliest !== null;
        if (Number(row.processing) > 1 || Number(row.heads) !== (unfinished ? 1 : 0) || (unfinished && Number(row.head) !== Number(row.earliest))) {
          laneViolations.push(`${when}: lane ${row.lane}: ${row.processing} processing, ${row.heads} heads, head at ${row.head}, earliest unfinished ${row.earliest}`);
        }
      }
    };

    const phase = await conflictsRetriedDuring(() =>
      Promise.all([
        ...claimers.map(async (ledger, c) => {
          const owner = `claimer-${c}`;
          while (!done() && wins.byId.size < total) {
            const seen = completed;
            const limit = between(random, 1, 8);
            try {
              const { items } = await ledger.claim({ queue, owner, limit, leaseMs: 600_000 });
              handedOut(owner, items, 'claim');
              work.push(...items);
              if (items.length > 0) continue;
              // Every head is held: the next completion makes another one.
              await waitFor(() => completed !== seen || done() || wins.byId.size >= total, deadline - Date.now(), 'a completion');
            } catch (error) {
              failures.push({ who: owner, what: `claim(limit ${limit})`, error });
            }
          }
        }),
        ...completers.map(async (ledger, c) => {
          const owner = `completer-${c}`;
          /** Successors this completer claimed with its completions: it completes them next (lane affinity). */
          const mine: ClaimedItem[] = [];
          for (let batchNo = 0; !done(); batchNo++) {
            if (mine.length === 0 && work.length === 0) {
              try {
                await waitFor(() => work.length > 0 || done(), deadline - Date.now(), 'claimed work');
              } catch (error) {
                failures.push({ who: owner, what: 'waiting for work', error });
              }
              continue;
            }
            const size = between(random, 1, 8);
            const batch = [...mine.splice(0, size)];
            batch.push(...work.splice(0, size - batch.length));
            const next = { owner, token: newLeaseToken(), leaseMs: 600_000, max: between(random, 0, 4) };
            try {
              const { results, claimed } = await ledger.completeManyClaimingNext(
                batch.map((handle) => ({ handle })),
                next,
              );
              results.forEach((r: FinalizeResult, k) => (r.won ? completed++ : lost.push(`${owner}'s completion of ${batch[k]!.id}`)));
              successorsClaimed += claimed.length;
              handedOut(owner, claimed, 'with a completion');
              mine.push(...claimed);
              if (batchNo % 5 === 0) {
                laneChecks++;
                await checkLanes(ledger, `after ${owner}'s batch ${batchNo}`);
              }
            } catch (error) {
              failures.push({ who: owner, what: `completeManyClaimingNext(${batch.length} items, max ${next.max})`, error });
            }
          }
        }),
      ]),
    );
    recordRetries(label, 'claim-vs-laned-completion', 'run', phase, () => ({
      successorsClaimed,
      claimedByClaims: [...wins.byId.values()].filter((w) => w.how === 'claim').length,
      laneChecks,
    }));
    expect(describeFailures(failures), `${note}: calls that failed`).toEqual([]);
    expect(lost, `${note}: completions lost`).toEqual([]);
    expect(laneViolations.slice(0, 10), `${note}: lane heads seen while it ran`).toEqual([]);
    expect(wins.duplicates, `${note}: items handed out twice`).toEqual([]);
    expect(wins.byId.size, note).toBe(total);
    expect([...wins.byId.values()].filter((w) => w.attempt !== 1).map((w) => w.item.id), `${note}: handed out at another attempt`).toEqual([]);
    // Lane affinity really took part: completions claimed successors, and claims took lane heads too.
    expect(successorsClaimed, note).toBeGreaterThan(0);
    expect([...wins.byId.values()].some((w) => w.who.startsWith('claimer-') && w.item.lane !== null), note).toBe(true);
    // Each lane handed out strictly in lane order: 1, 2, … (the next only once the one before had ended).
    expect(laneOrder.size).toBe(LANES);
    for (const [lane, seqs] of laneOrder) expect(seqs, `${note}: lane ${lane}`).toEqual(Array.from({ length: LANE_ITEMS }, (_, n) => n + 1));
    // And by the ledger's own clock: no item started before the one ahead of it in its lane had ended.
    const overlapping = await sql<{ n: number | string }>`SELECT COUNT(*) AS n
      FROM ${tl.ledger.tables.items} a JOIN ${tl.ledger.tables.items} b
        ON b.queue = a.queue AND b.lane = a.lane AND b.lane_seq = a.lane_seq + 1
      WHERE a.queue = ${queue} AND b.started_at < a.terminal_at`.execute(tl.ledger.db);
    expect(Number(overlapping.rows[0]?.n), note).toBe(0);
    const [stats] = await tl.ledger.stats(queue);
    expect(stats?.counts, note).toEqual({ pending: 0, processing: 0, blocked: 0, completed: total, skipped: 0, dead: 0, cancelled: 0 });
    expect(await historyCount(tl.ledger), note).toBe(0);
    const lanes = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${tl.ledger.tables.lanes}
      WHERE queue = ${queue} AND busy_from = 0 AND next_seq = ${LANE_ITEMS}`.execute(tl.ledger.db);
    expect(Number(lanes.rows[0]?.n), `${note}: lane rows settled`).toBe(LANES);
    if (label.family === 'mariadb') {
      expect(retriesByErrno(phase.retried), `${note}: conflicts retried`).not.toHaveProperty(String(ER_LOCK_DEADLOCK));
    }
  });
}, 180_000);

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

test('reclaim against renew: an item is either kept by its holder or reclaimed once, and a reclaimed lease no longer renews', async () => {
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
      ...Array.from({ length: HELD }, (_, k) => ({ queue, type: 't', payload: { k: HELD + k }, maxAttempts: 3, lane: `R${k % (HELD / 2)}` })),
    ]);
    // Each holder claims its share; the lane heads' successors stay pending behind them.
    const held: { item: ClaimedItem; holder: number; habit: Habit }[] = [];
    for (let h = 0; held.length < HELD; h = (h + 1) % HOLDERS) {
      const { items } = await holders[h]!.claim({ queue, owner: `holder-${h}`, limit: Math.min(12, HELD - held.length), leaseMs: CLAIM_LEASE_MS });
      expect(items.length, 'claimable items left').toBeGreaterThan(0);
      for (const item of items) held.push({ item, holder: h, habit: HABITS[held.length % HABITS.length]! });
    }
    // The test waits on the ledger's clock, estimated locally (one server on this machine) and read for real around every call.
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
            if (out.reclaimed.length + out.dead.length + out.cancelled.length > 0) reclaims.push({ by: `reclaimer-${r}`, ...out });
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
    expect(reclaims.flatMap((r) => [...r.dead, ...r.cancelled]), note).toEqual([]);
    expect([...reclaimedBy].filter(([, by]) => by.length > 1), `${note}: reclaimed twice`).toEqual([]);

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
        if (x.after + 2 < lo && !x.renewed) wrong.push(`${what}: renewal ${n} ran while its lease was live (until ≥ ${lo}, ended ${x.after}) and was refused`);
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
          wrong.push(`${what}: never reclaimed, but ${row?.state} under ${row?.lease_owner}/${row?.lease_token}, attempt ${row?.attempt}`);
        }
        continue;
      }
      // Reclaimed: the ledger's history says when; the lease had run out by then, renewed or not.
      const attempts = (await tl.ledger.inspect(item.id))?.attempts ?? [];
      const expiry = attempts.filter((a) => a.outcome === 'lease_expired');
      if (expiry.length !== 1 || expiry[0]?.attempt !== 1 || expiry[0]?.worker !== `holder-${holder}`) {
        wrong.push(`${what}: reclaimed, but its history is ${JSON.stringify(attempts.map((a) => [a.attempt, a.outcome, a.worker]))}`);
        continue;
      }
      const reclaimedAt = expiry[0].endedAt.getTime();
      if (reclaimedAt + 2 < item.leaseUntil.getTime()) wrong.push(`${what}: reclaimed at ${reclaimedAt}, before its claim's lease ran out at ${item.leaseUntil.getTime()}`);
      for (const [n, x] of log.entries()) {
        // A renewal that won extended the lease to at least `before + leaseMs`: no reclaim before that.
        if (x.renewed && reclaimedAt + 2 < x.before + x.leaseMs) wrong.push(`${what}: renewal ${n} won (lease ≥ ${x.before + x.leaseMs}) but it was reclaimed at ${reclaimedAt}`);
        // After the reclaim, the old token renews no more.
        if (x.before > reclaimedAt + 2 && x.renewed) wrong.push(`${what}: renewal ${n} at ${x.before} won after the reclaim at ${reclaimedAt}`);
      }
      if (refused === -1) wrong.push(`${what}: reclaimed at ${reclaimedAt}, but its holder's every renewal won`);
      if (row?.state !== 'pending' || row.attempt !== 1) wrong.push(`${what}: reclaimed, but ${row?.state} at attempt ${row?.attempt}`);
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
    expect(held.filter((h) => h.habit === 'hung').every((h) => reclaimedBy.has(h.item.id)), note).toBe(true);
    expect(kept, `${note}: items kept by their holders`).toBeGreaterThan(0);
    if (label.family === 'mariadb') {
      expect(retriesByErrno(phase.retried), `${note}: conflicts retried`).not.toHaveProperty(String(ER_LOCK_DEADLOCK));
    }
  });
}, 120_000);
