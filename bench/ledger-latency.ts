/**
 * The ledger benchmark's claim latency (bench/ledger.ts): single claims with
 * and without one deep lane in the queue, and single-item complete() of a
 * lane head in a short lane and in the deep one.
 */
import { sql } from 'kysely';
import type { EnqueueInput, Ledger } from '../src/index.js';
import { cpuSample, cpuShare, fmt, isInterrupted, nowMs, percentile, waitForQuiet, type CpuShare } from './support.js';
import {
  DEEP_LANE_BATCH,
  ENQUEUE_BATCH,
  LATENCY_WARMUP,
  LEASE_MS,
  QUEUE,
  TYPE,
  VerificationFailed,
  enqueueInBatches,
  ownLaneInputs,
  payload,
  withFreshLedger,
  type Sizes,
} from './ledger-fixtures.js';

/** Single-item complete() probes per side (informational; the deep side can be slow). */
export const COMPLETE_PROBES = 10;

// ---------------------------------------------------------------------------
// 4. Claim latency, without and with one deep lane.

export interface LatencyRun {
  p50: number;
  p99: number;
  deepP50: number;
  deepP99: number;
  ratio: number;
  deepEnqueueItemsS: number;
  deepHeadClaims: number;
  /** Informational: single-item complete() of a lane head, in a short lane (A) and in the deep lane (B). */
  completeLaneHeadP50: number;
  completeDeepHeadP50: number;
}

/**
 * Two fresh databases are prepared side by side: A holds `heads` own-lane
 * items; B holds one lane of `deepItems` items (enqueued first, so its head
 * is among the oldest claimable heads) plus the same `heads` own-lane items.
 * Then single claims (limit 1, each followed by an untimed complete)
 * alternate A, B, B, A, … so the machine's noise falls on both sides alike.
 */
export async function benchLatency(sz: Sizes): Promise<{ value: LatencyRun; note: string; cpu: CpuShare }> {
  return withFreshLedger(async ({ ledger: a }) =>
    withFreshLedger(async ({ ledger: b }) => {
      await enqueueInBatches(a, ownLaneInputs(sz.latencyHeads), ENQUEUE_BATCH);
      const deep = Array.from(
        { length: sz.deepLaneItems },
        (_, i): EnqueueInput => ({ queue: QUEUE, type: TYPE, payload: payload(i), lane: 'deep' }),
      );
      const t0 = nowMs();
      await enqueueInBatches(b, deep, DEEP_LANE_BATCH);
      const deepEnqueueItemsS = sz.deepLaneItems / ((nowMs() - t0) / 1000);
      await enqueueInBatches(b, ownLaneInputs(sz.latencyHeads), ENQUEUE_BATCH);

      // Completion is untimed and goes through completeMany (the batch path the
      // throughput runs use): the single-item complete() of a deep-lane head is
      // measured separately below, because it is slow enough to dominate the run.
      const one = async (l: Ledger, record: number[] | null): Promise<string | null> => {
        const start = nowMs();
        const c = await l.claim({ queue: QUEUE, owner: 'bench-latency', limit: 1, leaseMs: LEASE_MS });
        const ms = nowMs() - start;
        const item = c.items[0];
        if (c.items.length !== 1 || !item)
          throw new VerificationFailed(`claim(limit 1) returned ${c.items.length} items from a full queue`);
        if (record) record.push(ms);
        const [done] = await l.completeMany([{ handle: item }]);
        if (!done?.won) throw new VerificationFailed(`complete lost its CAS for ${item.id}`);
        return item.lane;
      };

      for (let i = 0; i < LATENCY_WARMUP; i++) {
        await one(a, null);
        await one(b, null);
      }
      await waitForQuiet();
      const without: number[] = [];
      const withDeep: number[] = [];
      let deepHeadClaims = 0;
      const cpu0 = cpuSample();
      for (let i = 0; i < sz.latencySamples; i++) {
        if (isInterrupted()) throw new Error('interrupted');
        const order: [Ledger, number[]][] =
          i % 2 === 0
            ? [
                [a, without],
                [b, withDeep],
              ]
            : [
                [b, withDeep],
                [a, without],
              ];
        for (const [l, rec] of order) {
          const lane = await one(l, rec);
          if (l === b && lane === 'deep') deepHeadClaims++;
        }
      }
      const cpu = cpuShare(cpu0);

      // Informational probe: complete() (the single-item path) of a lane head,
      // in a short lane of A and in B's deep lane. Lane bookkeeping should not
      // depend on how deep the lane is either (docs/design/states.md).
      await enqueueInBatches(
        a,
        Array.from(
          { length: COMPLETE_PROBES + 1 },
          (_, i): EnqueueInput => ({ queue: QUEUE, type: TYPE, payload: payload(i), lane: 'short' }),
        ),
        ENQUEUE_BATCH,
      );
      const completeShort: number[] = [];
      const completeDeep: number[] = [];
      for (let i = 0; i < COMPLETE_PROBES; i++) {
        for (const [l, lane, rec] of [
          [a, 'short', completeShort],
          [b, 'deep', completeDeep],
        ] as const) {
          const head = await sql<{ id: string }>`SELECT id FROM ${l.tables.items}
            WHERE queue = ${QUEUE} AND lane = ${lane} AND state = 'pending' AND is_head = 1
            ORDER BY lane_seq LIMIT 1`.execute(l.db);
          const id = head.rows[0]?.id;
          if (id === undefined) throw new VerificationFailed(`lane ${lane} has no head`);
          const [item] = await l.claimByIds({ queue: QUEUE, owner: 'bench-latency', leaseMs: LEASE_MS, ids: [id] });
          if (!item) throw new VerificationFailed(`claimByIds lost the head of lane ${lane}`);
          const start = nowMs();
          const done = await l.complete(item);
          rec.push(nowMs() - start);
          if (!done.won) throw new VerificationFailed(`complete lost its CAS for ${item.id}`);
        }
      }

      const p50 = percentile(without, 50);
      const deepP50 = percentile(withDeep, 50);
      const value: LatencyRun = {
        p50,
        p99: percentile(without, 99),
        deepP50,
        deepP99: percentile(withDeep, 99),
        ratio: deepP50 / p50,
        deepEnqueueItemsS,
        deepHeadClaims,
        completeLaneHeadP50: percentile(completeShort, 50),
        completeDeepHeadP50: percentile(completeDeep, 50),
      };
      const note = `${fmt(sz.latencySamples)} claims per side; ${deepHeadClaims} of them took the deep lane's head`;
      return { value, note, cpu };
    }),
  );
}
