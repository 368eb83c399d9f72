/** The run's figures: throughput, latency, rescue, attempts, RSS and log volume, from what was recorded. */
import { readFileSync } from 'node:fs';
import { percentiles, phaseAt, pushTo, type Percentiles } from './check-kit.js';
import type { FaultLog } from './faults.js';
import type { CheckResult } from './invariants.js';
import type { ProbeRecords } from './probe-records.js';
import type { Recorded } from './recorded.js';
import type { KillRescue, RescueResult } from './rescue.js';
import type { Generation } from './workers.js';

export interface Figures {
  items: { acknowledged: number; completed: number; dead: number; other: number };
  throughput: { overallPerS: number; duringFaultsPerS: number };
  enqueueToStartMs: Percentiles;
  /** By the phase an item was enqueued in (latency) or an attempt ended in (expired leases, other failed attempts). */
  byPhase: Record<
    string,
    { enqueued: number; enqueueToStartMs: Percentiles; leasesExpired: number; otherSpentAttempts: number }
  >;
  rescue: RescueFigures;
  attempts: {
    claims: number;
    extraClaims: number;
    spentByFaults: Record<string, number>;
    leaseExpiriesOnLiveWorkers: Record<string, number>;
  };
  faults: Record<string, number>;
  workers: {
    worker: string;
    gen: number;
    pid: number;
    lifetimeS: number;
    rssStartMiB: number | null;
    rssEndMiB: number | null;
    endedBy: string;
  }[];
  workerStartupMs: Percentiles;
  logs: { warnOrWorse: Record<string, number>; lostCas: number };
}

/** The rescues after SIGKILLs (chaos/rescue.ts), by part, each with the allowance this run measured for it. */
export interface RescueFigures {
  kills: number;
  /** Kills on a healthy network whose worker held nothing when it died (nothing to measure). */
  idleKills: number;
  itemsHeld: number;
  healthy: {
    items: number;
    rescueMs: Percentiles;
    rescueBoundMs: Percentiles;
    /** Reclaim - the lease's end, and its allowance (interval + tail + timer lag + work). */
    reclaimLatenessMs: Percentiles;
    reclaimAllowanceMs: Percentiles;
    timerLagMs: Percentiles;
    tailMs: Percentiles;
    workMs: Percentiles;
    /** From the reclaim's commit to its announcement (the pass's reclaimedAtMs). */
    announceMs: Percentiles;
    /** Next claim - announcement, and its allowance (the end of the first round that took it or had to). */
    reclaimClaimMs: Percentiles;
    reclaimClaimAllowanceMs: Percentiles;
    /** Next claim - the reclaim's commit (announce + re-claim). */
    claimAfterCommitMs: Percentiles;
    /** Leases that ran past kill + lease (a claim or renewal the ledger ran after the kill was sent). */
    lateLeases: number;
  };
  duringNetworkFaults: { items: number; rescueMs: Percentiles; reclaimMs: Percentiles };
  sigstopRescueMs: Percentiles;
  /** The event loop's delay in the workers (max of each 100 ms window): over all windows, and w0's. */
  eventLoopDelayMs: { all: Percentiles; w0: Percentiles };
  perKill: {
    at: string;
    worker: string;
    held: number;
    healthy: number;
    rescueMaxMs: number | null;
    boundMinMs: number | null;
    boundMaxMs: number | null;
  }[];
}

export function rescueFigures(r: RescueResult, probes: ProbeRecords, faults: FaultLog): RescueFigures {
  const healthy = r.kills.filter((k) => k.clean && k.rescueMs !== undefined);
  const other = r.kills.filter((k) => !k.clean && k.rescueMs !== undefined);
  const p = (list: readonly KillRescue[], f: (k: KillRescue) => number | undefined): Percentiles =>
    percentiles(list.flatMap((k) => (f(k) === undefined ? [] : [f(k)!])));
  const start = faults.phases[0]?.startMs ?? 0;
  const perKill: RescueFigures['perKill'] = [];
  for (const e of faults.events) {
    if (e.kind !== 'sigkill') continue;
    const mine = r.kills.filter((k) => k.pid === e.pid && k.killAtMs === e.startMs);
    const ok = mine.filter((k) => k.clean && k.rescueMs !== undefined);
    const bounds = ok.flatMap((k) => (k.rescueBoundMs === undefined ? [] : [k.rescueBoundMs]));
    perKill.push({
      at: `+${((e.startMs - start) / 1000).toFixed(1)} s (${phaseAt(faults.phases, e.startMs)})`,
      worker: e.worker ?? '?',
      held: e.held?.length ?? -1,
      healthy: ok.length,
      rescueMaxMs: ok.length === 0 ? null : Math.round(Math.max(...ok.map((k) => k.rescueMs!))),
      boundMinMs: bounds.length === 0 ? null : Math.round(Math.min(...bounds)),
      boundMaxMs: bounds.length === 0 ? null : Math.round(Math.max(...bounds)),
    });
  }
  return {
    kills: faults.count('sigkill'),
    idleKills: r.idleKills,
    itemsHeld: r.kills.length,
    healthy: {
      items: healthy.length,
      rescueMs: p(healthy, (k) => k.rescueMs),
      rescueBoundMs: p(healthy, (k) => k.rescueBoundMs),
      reclaimLatenessMs: p(healthy, (k) => k.reclaimLatenessMs),
      reclaimAllowanceMs: p(healthy, (k) => k.reclaimAllowanceMs),
      timerLagMs: p(healthy, (k) => k.reclaim?.timerLagMs),
      tailMs: p(healthy, (k) => k.reclaim?.tailMs),
      workMs: p(healthy, (k) => k.reclaim?.workMs),
      announceMs: p(healthy, (k) => k.announceMs),
      reclaimClaimMs: p(healthy, (k) => k.reclaimClaimMs),
      reclaimClaimAllowanceMs: p(healthy, (k) => k.reclaimClaimAllowanceMs),
      claimAfterCommitMs: p(healthy, (k) =>
        k.reclaimClaimMs === undefined ? undefined : k.reclaimClaimMs + (k.announceMs ?? 0),
      ),
      lateLeases: healthy.filter((k) => k.lateLeaseMs !== undefined).length,
    },
    duringNetworkFaults: {
      items: other.length,
      rescueMs: p(other, (k) => k.rescueMs),
      reclaimMs: p(other, (k) => k.reclaimMs),
    },
    sigstopRescueMs: percentiles(r.freezes.flatMap((f) => (f.rescueMs === null ? [] : [f.rescueMs]))),
    eventLoopDelayMs: {
      all: percentiles(probes.eld.map((w) => w.maxMs)),
      w0: percentiles(probes.eld.filter((w) => w.proc.startsWith('w0.')).map((w) => w.maxMs)),
    },
    perKill,
  };
}

export function computeFigures(
  recorded: Recorded,
  result: CheckResult,
  rescue: RescueFigures,
  faults: FaultLog,
  generations: readonly Generation[],
  startupMs: readonly number[],
  acknowledged: number,
): Figures {
  const { items, attempts } = recorded;
  const completed = items.filter((i) => i.state === 'completed');
  const firstClaim = new Map<string, number>();
  for (const a of attempts)
    if (a.startedUs !== null) firstClaim.set(a.itemId, Math.min(firstClaim.get(a.itemId) ?? Infinity, a.startedUs));
  for (const i of items)
    if (i.startedUs !== null) firstClaim.set(i.id, Math.min(firstClaim.get(i.id) ?? Infinity, i.startedUs));

  const waits: number[] = [];
  const waitsByPhase = new Map<string, number[]>();
  for (const i of items) {
    const f = firstClaim.get(i.id);
    if (f === undefined) continue;
    const ms = (f - i.createdUs) / 1000;
    waits.push(ms);
    const phase = phaseAt(faults.phases, i.createdUs / 1000);
    pushTo(waitsByPhase, phase, ms);
  }

  const start = items.reduce((m, i) => Math.min(m, i.createdUs), Infinity);
  const end = completed.reduce((m, i) => Math.max(m, i.terminalUs ?? 0), 0);
  const faultStart = faults.phases[0]?.startMs ?? 0;
  const faultEnd = faults.phases[faults.phases.length - 1]?.endMs ?? 0;
  const inFaults = completed.filter(
    (i) => (i.terminalUs ?? 0) >= faultStart * 1000 && (i.terminalUs ?? 0) < faultEnd * 1000,
  ).length;

  const claims = items.reduce((n, i) => n + i.attempt, 0);

  const faultCounts: Record<string, number> = {};
  for (const e of faults.events) faultCounts[e.kind] = (faultCounts[e.kind] ?? 0) + 1;

  return {
    items: {
      acknowledged,
      completed: completed.length,
      dead: items.filter((i) => i.state === 'dead').length,
      other: items.filter((i) => i.state !== 'dead' && i.state !== 'completed').length,
    },
    throughput: {
      overallPerS: round(completed.length / Math.max(0.001, (end - start) / 1e6)),
      duringFaultsPerS: round(inFaults / Math.max(0.001, (faultEnd - faultStart) / 1000)),
    },
    enqueueToStartMs: percentiles(waits),
    byPhase: byPhase(recorded, faults, waitsByPhase),
    rescue,
    attempts: {
      claims,
      extraClaims: claims - items.length,
      spentByFaults: result.spentByFaults,
      leaseExpiriesOnLiveWorkers: result.liveLeaseExpiries,
    },
    faults: faultCounts,
    workers: generations.map((g) => ({
      worker: g.worker,
      gen: g.gen,
      pid: g.pid,
      lifetimeS: round(((g.exitedAtMs ?? Date.now()) - g.startedAtMs) / 1000),
      rssStartMiB: g.rssStartKiB === undefined ? null : round(g.rssStartKiB / 1024),
      rssEndMiB: g.rssEndKiB === undefined ? null : round(g.rssEndKiB / 1024),
      endedBy: g.endedBy ?? (g.exit ? `exited by itself (${g.exit.code ?? g.exit.signal})` : 'running'),
    })),
    workerStartupMs: percentiles(startupMs),
    logs: scanLogs(generations),
  };
}

function byPhase(recorded: Recorded, faults: FaultLog, waits: Map<string, number[]>): Figures['byPhase'] {
  const out: Figures['byPhase'] = {};
  const entry = (phase: string): Figures['byPhase'][string] =>
    (out[phase] ??= { enqueued: 0, enqueueToStartMs: percentiles([]), leasesExpired: 0, otherSpentAttempts: 0 });
  for (const [phase, w] of waits) Object.assign(entry(phase), { enqueued: w.length, enqueueToStartMs: percentiles(w) });
  for (const a of recorded.attempts) {
    const e = entry(phaseAt(faults.phases, a.endedUs / 1000));
    if (a.outcome === 'lease_expired') e.leasesExpired++;
    else if ((a.outcome === 'retried' || a.outcome === 'dead') && !(a.error ?? '').includes('chaos: deliberate'))
      e.otherSpentAttempts++;
  }
  return out;
}

/** Warn-or-worse lines of every worker generation, counted by message. */
function scanLogs(generations: readonly Generation[]): Figures['logs'] {
  const counts: Record<string, number> = {};
  let lostCas = 0;
  for (const g of generations) {
    let text = '';
    try {
      text = readFileSync(g.logFile, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n')) {
      if (!line.startsWith('{')) continue;
      let entry: { level?: number; msg?: string };
      try {
        entry = JSON.parse(line) as { level?: number; msg?: string };
      } catch {
        continue;
      }
      if (entry.msg?.includes('lost its CAS')) lostCas++;
      if ((entry.level ?? 0) < 40) continue;
      const key = `${entry.level === 40 ? 'warn' : entry.level === 50 ? 'error' : 'fatal'}: ${entry.msg ?? '?'}`;
      counts[key] = (counts[key] ?? 0) + 1;
    }
  }
  return { warnOrWorse: counts, lostCas };
}

const round = (x: number): number => Math.round(x * 10) / 10;
