/**
 * What the workers' probes (chaos/probe.ts) wrote, read back after the run:
 * every reconciler pass, claim round and wake read of every worker process,
 * and each process's event-loop delay, by sample window.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClaimRoundMessage, ReconcilePassMessage, WakeReadMessage } from '../src/diagnostics.js';
import type { ProbeLine } from './probe.js';

/** One worker process (a generation of a slot: w1.g3). */
export interface ProbeProcess {
  label: string;
  pid: number;
  startedAtMs: number;
}

export interface PassRecord extends ReconcilePassMessage {
  proc: string;
}

export interface RoundRecord extends ClaimRoundMessage {
  proc: string;
}

export interface WakeReadRecord extends WakeReadMessage {
  proc: string;
}

/** The event loop's delay in one window [fromMs, toMs] of one process. */
export interface EldSample {
  proc: string;
  fromMs: number;
  toMs: number;
  maxMs: number;
  p99Ms: number;
  meanMs: number;
}

export interface ProbeRecords {
  processes: ProbeProcess[];
  /** Each sorted by its start time. */
  passes: PassRecord[];
  rounds: RoundRecord[];
  reads: WakeReadRecord[];
  /** Sorted by the window's end. */
  eld: EldSample[];
}

export const probeFileOf = (runDir: string, label: string): string => join(runDir, `probe-${label}.jsonl`);

export function emptyProbes(): ProbeRecords {
  return { processes: [], passes: [], rounds: [], reads: [], eld: [] };
}

/** Every probe file of the run. A line cut short (there should be none: each is one write) is skipped. */
export function readProbes(runDir: string): ProbeRecords {
  const out = emptyProbes();
  for (const name of readdirSync(runDir)) {
    const m = /^probe-(.+)\.jsonl$/.exec(name);
    if (!m) continue;
    const proc = m[1]!;
    for (const text of readFileSync(join(runDir, name), 'utf8').split('\n')) {
      if (text.length === 0) continue;
      let line: ProbeLine;
      try {
        line = JSON.parse(text) as ProbeLine;
      } catch {
        continue;
      }
      addLine(out, proc, line);
    }
  }
  sortProbes(out);
  return out;
}

export function addLine(out: ProbeRecords, proc: string, line: ProbeLine): void {
  switch (line.k) {
    case 'start':
      out.processes.push({ label: line.label, pid: line.pid, startedAtMs: line.atMs });
      break;
    case 'pass':
      out.passes.push({ ...(line.m as ReconcilePassMessage), proc });
      break;
    case 'round':
      out.rounds.push({ ...(line.m as ClaimRoundMessage), proc });
      break;
    case 'read':
      out.reads.push({ ...(line.m as WakeReadMessage), proc });
      break;
    case 'eld':
      out.eld.push({
        proc,
        fromMs: line.fromMs,
        toMs: line.toMs,
        maxMs: line.maxMs,
        p99Ms: line.p99Ms,
        meanMs: line.meanMs,
      });
      break;
  }
}

export function sortProbes(p: ProbeRecords): void {
  p.passes.sort((a, b) => a.startedAtMs - b.startedAtMs);
  p.rounds.sort((a, b) => a.startedAtMs - b.startedAtMs);
  p.reads.sort((a, b) => a.atMs - b.atMs);
  p.eld.sort((a, b) => a.toMs - b.toMs);
}

/** The first index of a sorted array whose key is >= `value` (binary search). */
export function firstAtOrAfter<T>(sorted: readonly T[], key: (x: T) => number, value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (key(sorted[mid]!) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The event-loop delay a process showed around [fromMs, toMs], from its own
 * windows (sorted by end): the max of those that overlap it and of the first
 * one after it (a stall is recorded when the monitor's timer finally fires,
 * after the stall), or undefined if the probe wrote no window after it (the
 * process was killed first).
 */
export function eldAround(windows: readonly EldSample[], fromMs: number, toMs: number): number | undefined {
  let max = 0;
  for (let i = firstAtOrAfter(windows, (s) => s.toMs, fromMs); i < windows.length; i++) {
    const s = windows[i]!;
    max = Math.max(max, s.maxMs);
    if (s.fromMs >= toMs) return max;
  }
  return undefined;
}

/** Groups records by process, each group keeping the order it had. */
export function byProc<T extends { proc: string }>(records: readonly T[]): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const r of records) {
    const list = out.get(r.proc);
    if (list) list.push(r);
    else out.set(r.proc, [r]);
  }
  return out;
}
