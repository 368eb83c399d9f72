/**
 * The ledger workload's drain (bench/workloads/ledger.ts): `claimers` loops of claim(limit 32) + completeMany on
 * ledgers of their own until the queue is empty, each item checked to complete once and each lane in order.
 */
import { sql } from 'kysely';
import { Ledger } from '../../src/index.js';
import { benchServerUrl, serverCpuSecondsOf, sleep } from '../support.js';
import { completedInLedger } from '../workload.js';

export const QUEUE = 'bench';
export const LEASE_MS = 30_000;
/** A loop that sees no completion anywhere for this long fails the run (a lost item would otherwise hang it). */
const STALL_MS = 60_000;

interface State {
  inFlight: number;
  events: number;
  lastProgress: number;
  completed: number;
  claims: number;
  claimed: Set<string>;
  /** Per lane, the laneSeq of the last item seen completing: completions must be strictly increasing. */
  lastSeq: Map<string, number>;
  problems: string[];
}

async function claimerLoop(owner: string, ledger: Ledger, s: State): Promise<void> {
  try {
    while (s.problems.length === 0) {
      const [heldBefore, eventsBefore] = [s.inFlight, s.events];
      s.claims++;
      const { items } = await ledger.claim({ queue: QUEUE, owner, limit: 32, leaseMs: LEASE_MS });
      if (items.length === 0) {
        // Nothing held or finished while this claim looked: no due head is left (another loop may yet unlock one).
        if (heldBefore === 0 && s.inFlight === 0 && s.events === eventsBefore) return;
        if (performance.now() - s.lastProgress > STALL_MS) s.problems.push(`no progress for ${STALL_MS} ms`);
        await sleep(1);
        continue;
      }
      s.inFlight += items.length;
      for (const it of items) {
        if (s.claimed.has(it.id)) s.problems.push(`${it.id} claimed twice`);
        s.claimed.add(it.id);
      }
      const results = await ledger.completeMany(items.map((handle) => ({ handle })));
      s.inFlight -= items.length;
      s.events++;
      s.lastProgress = performance.now();
      results.forEach((r, i) => {
        const it = items[i]!;
        if (!r.won) s.problems.push(`completion of ${it.id} lost its CAS`);
        s.completed++;
        if (it.lane === null) return;
        const last = s.lastSeq.get(it.lane) ?? -1;
        if ((it.laneSeq ?? -1) <= last) s.problems.push(`${it.lane}: seq ${it.laneSeq} completed after ${last}`);
        s.lastSeq.set(it.lane, Math.max(last, it.laneSeq ?? -1));
      });
    }
  } catch (error) {
    s.problems.push(`${owner}: ${error instanceof Error ? error.message : String(error)}`);
  }
}

export async function drainByClaims(
  ledger: Ledger,
  count: number,
  lanes: number | null,
  claimers: number,
): Promise<{ itemsS: number; nodeUs: number; serverUs: number }> {
  const workers = Array.from({ length: claimers }, () => new Ledger({ url: ledger.config.url, poolSize: 2 }));
  try {
    await Promise.all(workers.map((w) => w.now())); // connections open before the clock starts
    const s: State = {
      ...{ inFlight: 0, events: 0, lastProgress: performance.now(), completed: 0, claims: 0 },
      ...{ claimed: new Set(), lastSeq: new Map(), problems: [] },
    };
    const [server0, cpu0, t0] = [serverCpuSecondsOf(benchServerUrl()), process.cpuUsage(), performance.now()];
    await Promise.all(workers.map((w, k) => claimerLoop(`bench-claimer-${k}`, w, s)));
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const server1 = serverCpuSecondsOf(benchServerUrl());
    const completed = await completedInLedger({ ledger, queue: QUEUE });
    if (s.completed !== count || completed !== count) s.problems.push(`completed ${completed} of ${count}`);
    const again = await sql<{ n: string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items}
      WHERE queue = ${QUEUE} AND attempt <> 1`.execute(ledger.db);
    if (Number(again.rows[0]?.n) > 0) s.problems.push(`${again.rows[0]?.n} items claimed more than once`);
    if (lanes !== null && s.lastSeq.size !== lanes) s.problems.push(`saw ${s.lastSeq.size} of ${lanes} lanes`);
    if (s.problems.length > 0) throw new Error(`verification failed: ${s.problems.slice(0, 10).join(' | ')}`);
    return {
      itemsS: count / seconds,
      nodeUs: (cpu.user + cpu.system) / count,
      serverUs: server0 === undefined || server1 === undefined ? Number.NaN : ((server1 - server0) * 1e6) / count,
    };
  } finally {
    for (const w of workers) await w.close();
  }
}
