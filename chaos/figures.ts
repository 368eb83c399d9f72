/** The run's figures: throughput, latency, rescue, attempts, RSS and log volume, from what was recorded. */
import { readFileSync } from 'node:fs';
import type { FaultLog } from './faults.js';
import { percentiles, phaseAt, pushTo, type CheckResult, type Percentiles, type Recorded } from './invariants.js';
import type { Generation } from './workers.js';

export interface Figures {
  items: { acknowledged: number; completed: number; dead: number; other: number };
  throughput: { overallPerS: number; duringFaultsPerS: number };
  enqueueToStartMs: Percentiles;
  /** By the phase an item was enqueued in (latency) or an attempt ended in (expired leases, other failed attempts). */
  byPhase: Record<string, { enqueued: number; enqueueToStartMs: Percentiles; leasesExpired: number; otherSpentAttempts: number }>;
  rescueMs: {
    sigkillHealthyNetwork: Percentiles;
    sigkillHealthyNetworkReclaim: Percentiles;
    sigkillDuringNetworkFaults: Percentiles;
    sigstop: Percentiles;
    itemsHeldAtKills: number;
  };
  attempts: { claims: number; extraClaims: number; spentByFaults: Record<string, number>; leaseExpiriesOnLiveWorkers: Record<string, number> };
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

export function computeFigures(
  recorded: Recorded,
  result: CheckResult,
  faults: FaultLog,
  generations: readonly Generation[],
  startupMs: readonly number[],
  acknowledged: number,
): Figures {
  const { items, attempts } = recorded;
  const completed = items.filter((i) => i.state === 'completed');
  const firstClaim = new Map<string, number>();
  for (const a of attempts) if (a.startedUs !== null) firstClaim.set(a.itemId, Math.min(firstClaim.get(a.itemId) ?? Infinity, a.startedUs));
  for (const i of items) if (i.startedUs !== null) firstClaim.set(i.id, Math.min(firstClaim.get(i.id) ?? Infinity, i.startedUs));

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
  const inFaults = completed.filter((i) => (i.terminalUs ?? 0) >= faultStart * 1000 && (i.terminalUs ?? 0) < faultEnd * 1000).length;

  const rescue = result.rescue;
  const rescued = (pick: (r: (typeof rescue)[number]) => boolean): number[] =>
    rescue.filter(pick).flatMap((r) => (r.rescueMs === null ? [] : [r.rescueMs]));
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
    rescueMs: {
      sigkillHealthyNetwork: percentiles(rescued((r) => r.fault === 'sigkill' && r.clean)),
      sigkillHealthyNetworkReclaim: percentiles(rescue.filter((r) => r.fault === 'sigkill' && r.clean).map((r) => r.reclaimMs)),
      sigkillDuringNetworkFaults: percentiles(rescued((r) => r.fault === 'sigkill' && !r.clean)),
      sigstop: percentiles(rescued((r) => r.fault === 'sigstop')),
      itemsHeldAtKills: rescue.filter((r) => r.fault === 'sigkill').length,
    },
    attempts: { claims, extraClaims: claims - items.length, spentByFaults: result.spentByFaults, leaseExpiriesOnLiveWorkers: result.liveLeaseExpiries },
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
    else if ((a.outcome === 'retried' || a.outcome === 'dead') && !(a.error ?? '').includes('chaos: deliberate')) e.otherSpentAttempts++;
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
