/** What every check shares: its result, how it is built, percentiles, and the reading of times, owners and phases. */
import type { PhaseWindow } from './faults.js';
import type { AttemptRow, ItemRow } from './recorded.js';

export interface Check {
  name: string;
  ok: boolean;
  /** How many things were checked, and how many broke it. */
  checked: number;
  violations: number;
  /** The first offenders, precisely (item ids, times). */
  examples: string[];
}

export class CheckBuilder {
  private readonly examples: string[] = [];
  private violations = 0;
  checked = 0;

  constructor(readonly name: string) {}

  fail(example: string): void {
    this.violations++;
    if (this.examples.length < 12) this.examples.push(example);
  }

  done(extraOk = true): Check {
    return {
      name: this.name,
      ok: this.violations === 0 && extraOk,
      checked: this.checked,
      violations: this.violations,
      examples: this.examples,
    };
  }
}

export interface Percentiles {
  n: number;
  p50: number | null;
  p99: number | null;
  max: number | null;
}

export function percentiles(values: readonly number[]): Percentiles {
  if (values.length === 0) return { n: 0, p50: null, p99: null, max: null };
  const s = [...values].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
  return { n: s.length, p50: round(at(0.5)), p99: round(at(0.99)), max: round(s[s.length - 1]!) };
}

const round = (x: number): number => Math.round(x * 10) / 10;

/** The pid in a lease owner's name (host:pid:random). */
export function pidOf(worker: string | null): number | undefined {
  const m = worker ? /:(\d+):[0-9a-f]+$/.exec(worker) : null;
  return m ? Number(m[1]) : undefined;
}

export function phaseAt(phases: readonly PhaseWindow[], ms: number): string {
  const p = phases.find((w) => ms >= w.startMs && ms < w.endMs);
  return p ? p.name : ms < (phases[0]?.startMs ?? 0) ? 'before the faults' : 'after the faults';
}

export function overlapsNetworkFault(phases: readonly PhaseWindow[], fromMs: number, toMs: number): boolean {
  return phases.some((w) => w.network && w.startMs < toMs && w.endMs > fromMs);
}

export function pushTo<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** Every time the ledger says the item was claimed: each history row's start, and the latest claim. */
export function claimTimes(item: ItemRow, attempts: readonly AttemptRow[]): number[] {
  const times = attempts.map((a) => a.startedUs).filter((t): t is number => t !== null);
  if (item.startedUs !== null) times.push(item.startedUs);
  return times;
}

export function iso(us: number): string {
  const whole = Math.round(us);
  const d = new Date(Math.floor(whole / 1000));
  return `${d.toISOString().slice(11, 23)}${String(whole % 1000).padStart(3, '0')}Z`;
}
