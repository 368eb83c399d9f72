import { sql } from 'kysely';
import { expect, test } from 'vitest';
import { newLeaseToken } from '../src/ledger/ids.js';
import type { Ledger, EnqueueInput } from '../src/ledger/ledger.js';
import type { ClaimedItem, FinalizeResult } from '../src/ledger/types.js';
import { conflictsRetriedDuring, ER_LOCK_DEADLOCK, retriesByErrno } from './support/conflicts.js';
import {
  between,
  describeFailures,
  enqueueAll,
  recordRetries,
  sample,
  seedOf,
  serverLabel,
  withLedgers,
  Wins,
  type Failure,
  type Win,
} from './support/claim-stress.js';
import { freshQueue, historyCount } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { seededRandom } from './support/random.js';
import { exactCounts } from './support/counts.js';
// Claims under contention (see test/support/claim-stress.ts): claims against laned completions that hand each lane on.

const LANED_CLAIMERS = 8;
const COMPLETERS = 8;
const LANES = 24;
const LANE_ITEMS = 12;
const LANELESS_AMONG = 96;

test('claims against laned completions that hand each lane to its ' +
  'successor: no errors, one head per lane in lane order, exactly once', async () => {
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
        ...Array.from({ length: LANES * LANE_ITEMS }, (_, k) => ({
          queue,
          type: 't',
          payload: { k },
          priority: between(random, 0, 1),
          lane: `L${k % LANES}`,
        })),
        ...Array.from({ length: LANELESS_AMONG }, (_, k) => ({
          queue,
          type: 't',
          payload: { k: -1 - k },
          priority: between(random, 0, 1),
        })),
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
      for (const i of items)
        if (i.lane !== null) laneOrder.set(i.lane, [...(laneOrder.get(i.lane) ?? []), i.laneSeq ?? -1]);
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

    /**
     * One statement, one snapshot: per lane at most one item processing, exactly one head while it has unfinished
     * items, and that head its earliest.
     */
    const checkLanes = async (ledger: Ledger, when: string): Promise<void> => {
      const r = await sql<{
        lane: string;
        processing: number | string;
        heads: number | string;
        earliest: number | string | null;
        head: number | string | null;
      }>`
        SELECT lane, SUM(state = 'processing') AS processing,
          SUM(is_head = 1 AND state IN ('pending', 'processing', 'blocked')) AS heads,
          MIN(CASE WHEN state IN ('pending', 'processing', 'blocked') THEN lane_seq END) AS earliest,
          MIN(CASE WHEN is_head = 1 AND state IN ('pending', 'processing', 'blocked') THEN lane_seq END) AS head
        FROM ${ledger.tables.items} WHERE queue = ${queue} AND lane IS NOT NULL GROUP BY lane`.execute(ledger.db);
      for (const row of r.rows) {
        const unfinished = row.earliest !== null;
        if (
          Number(row.processing) > 1 ||
          Number(row.heads) !== (unfinished ? 1 : 0) ||
          (unfinished && Number(row.head) !== Number(row.earliest))
        ) {
          laneViolations.push(
            `${when}: lane ${row.lane}: ${row.processing} processing, ${row.heads} ` +
              `heads, head at ${row.head}, earliest unfinished ${row.earliest}`,
          );
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
              await waitFor(
                () => completed !== seen || done() || wins.byId.size >= total,
                deadline - Date.now(),
                'a completion',
              );
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
              results.forEach((r: FinalizeResult, k) =>
                r.won ? completed++ : lost.push(`${owner}'s completion of ${batch[k]!.id}`),
              );
              successorsClaimed += claimed.length;
              handedOut(owner, claimed, 'with a completion');
              mine.push(...claimed);
              if (batchNo % 5 === 0) {
                laneChecks++;
                await checkLanes(ledger, `after ${owner}'s batch ${batchNo}`);
              }
            } catch (error) {
              failures.push({
                who: owner,
                what: `completeManyClaimingNext(${batch.length} items, max ${next.max})`,
                error,
              });
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
    expect(
      [...wins.byId.values()].filter((w) => w.attempt !== 1).map((w) => w.item.id),
      `${note}: handed out at another attempt`,
    ).toEqual([]);
    // Lane affinity really took part: completions claimed successors, and claims took lane heads too.
    expect(successorsClaimed, note).toBeGreaterThan(0);
    expect(
      [...wins.byId.values()].some((w) => w.who.startsWith('claimer-') && w.item.lane !== null),
      note,
    ).toBe(true);
    // Each lane handed out strictly in lane order: 1, 2, … (the next only once the one before had ended).
    expect(laneOrder.size).toBe(LANES);
    for (const [lane, seqs] of laneOrder)
      expect(seqs, `${note}: lane ${lane}`).toEqual(Array.from({ length: LANE_ITEMS }, (_, n) => n + 1));
    // And by the ledger's own clock: no item started before the one ahead of it in its lane had ended.
    const overlapping = await sql<{ n: number | string }>`SELECT COUNT(*) AS n
      FROM ${tl.ledger.tables.items} a JOIN ${tl.ledger.tables.items} b
        ON b.queue = a.queue AND b.lane = a.lane AND b.lane_seq = a.lane_seq + 1
      WHERE a.queue = ${queue} AND b.started_at < a.terminal_at`.execute(tl.ledger.db);
    expect(Number(overlapping.rows[0]?.n), note).toBe(0);
    const [stats] = await tl.ledger.stats(queue);
    expect(exactCounts(stats), note).toEqual({
      pending: 0,
      processing: 0,
      blocked: 0,
      completed: total,
      skipped: 0,
      dead: 0,
      cancelled: 0,
    });
    expect(await historyCount(tl.ledger), note).toBe(0);
    const lanes = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${tl.ledger.tables.lanes}
      WHERE queue = ${queue} AND busy_from = 0 AND next_seq = ${LANE_ITEMS}`.execute(tl.ledger.db);
    expect(Number(lanes.rows[0]?.n), `${note}: lane rows settled`).toBe(LANES);
    if (label.family === 'mariadb') {
      expect(retriesByErrno(phase.retried), `${note}: conflicts retried`).not.toHaveProperty(String(ER_LOCK_DEADLOCK));
    }
  });
}, 180_000);
