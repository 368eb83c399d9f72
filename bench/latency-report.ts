/** The tables bench/latency.ts prints: the latency cells, the goal, and the ledger calls timed alone. */
import type { CallTimes } from './ledger-calls.js';
import type { AddedLatency } from './latency-proxy.js';
import type { KindTotals } from './sql-count.js';
import { fmt, median, minMax, printTable } from './support.js';

export interface Cell {
  server: string;
  latency: AddedLatency;
  bulkJobs: number;
  /** `SELECT 1` on one connection through the cell's path. */
  pingP50Ms: number;
  pingP99Ms: number;
  bulkJobsS: number[];
  bulkRoundTrips: KindTotals[];
  sameP50: number[];
  sameP99: number[];
  redisP50: number[];
  redisP99: number[];
  /** The whole machine's busy share (all cores, every process) during each run of the cell. */
  machineBusyPct: number[];
}

export interface GoalCheck {
  server: string;
  bulkJobsS: number;
  bulkReached: boolean;
  sameProcessP50Ms: number;
  ownProducerP50Ms: number;
  p50Reached: { sameProcess: boolean; ownProducer: boolean };
}

const ms = (v: number[]): string => fmt(median(v), 2);

function perJob(c: Cell, kind: keyof KindTotals): string {
  return fmt(median(c.bulkRoundTrips.map((t) => t[kind] / c.bulkJobs)), 3);
}

/** The cells' table, and whether the goal's figures were reached at its latency. */
export function printCells(
  title: string,
  cells: readonly Cell[],
  goal: { latencyLabel: string; bulkJobsS: number; p50Ms: number },
): GoalCheck[] {
  printTable(
    title,
    [
      'server',
      'added per direction',
      'SELECT 1 p50',
      'bulk jobs/s',
      'min–max',
      'claim RT/job',
      'completion RT/job',
      'p50 same process',
      'p99',
      'p50 own producer',
      'p99',
      'machine busy',
    ],
    cells.map((c) => {
      const { min, max } = minMax(c.bulkJobsS);
      return [
        c.server,
        c.latency.direct
          ? 'direct (no proxy)'
          : `${c.latency.label} ` +
            `ms${c.latency.upMs !== c.latency.downMs ? ` (${c.latency.upMs} up, ${c.latency.downMs} down)` : ''}`,
        `${fmt(c.pingP50Ms, 2)} ms`,
        fmt(median(c.bulkJobsS)),
        `${fmt(min)}–${fmt(max)}`,
        perJob(c, 'claim'),
        perJob(c, 'complete'),
        ms(c.sameP50),
        ms(c.sameP99),
        ms(c.redisP50),
        ms(c.redisP99),
        `${fmt(median(c.machineBusyPct))}%`,
      ];
    }),
    ['left', 'left', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
  );
  const checks: GoalCheck[] = cells
    .filter((c) => !c.latency.direct && c.latency.label === goal.latencyLabel)
    .map((c) => {
      const bulk = median(c.bulkJobsS);
      const same = median(c.sameP50);
      const own = median(c.redisP50);
      return {
        server: c.server,
        bulkJobsS: Math.round(bulk),
        bulkReached: bulk >= goal.bulkJobsS,
        sameProcessP50Ms: Math.round(same * 100) / 100,
        ownProducerP50Ms: Math.round(own * 100) / 100,
        p50Reached: { sameProcess: same <= goal.p50Ms, ownProducer: own <= goal.p50Ms },
      };
    });
  console.log(
    `\ngoal at ${goal.latencyLabel} ms added per direction: bulk ≥ ` +
      `${fmt(goal.bulkJobsS)} jobs/s at concurrency 64, enqueue→start p50 ≤ ` +
      `${goal.p50Ms} ms`,
  );
  for (const g of checks) {
    const yes = (b: boolean): string => (b ? 'reached' : 'NOT reached');
    console.log(
      `- ${g.server}: bulk ${fmt(g.bulkJobsS)} jobs/s (${yes(g.bulkReached)}); p50 ` +
        `${fmt(g.sameProcessP50Ms, 2)} ms same process ` +
        `(${yes(g.p50Reached.sameProcess)}), ${fmt(g.ownProducerP50Ms, 2)} ms own ` +
        `producer (${yes(g.p50Reached.ownProducer)})`,
    );
  }
  return checks;
}

export function printCallTimes(title: string, rows: readonly { server: string; times: CallTimes }[]): void {
  printTable(
    title,
    ['server', 'enqueue', 'claim by id', 'completion', 'laned enqueue', 'laned completion'],
    rows.map((r) => [
      r.server,
      ...[r.times.enqueue, r.times.claimById, r.times.complete, r.times.enqueueLaned, r.times.completeLaned].map((v) =>
        fmt(v, 2),
      ),
    ]),
    ['left', 'right', 'right', 'right', 'right', 'right'],
  );
}
