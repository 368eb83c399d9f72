// How numbers, durations and times read on every page.

import type { BoundedCount } from './types.js';

const int = new Intl.NumberFormat('en-US');

export function count(n: number): string {
  return int.format(n);
}

/** A bounded count: `10,000+` when it stopped at its cap. */
export function boundedCount(c: BoundedCount): string {
  return c.atLeast ? `${int.format(c.count)}+` : int.format(c.count);
}

/** The sum of bounded counts: a floor if any of them is. */
export function sumCounts(counts: readonly BoundedCount[]): BoundedCount {
  return { count: counts.reduce((n, c) => n + c.count, 0), atLeast: counts.some((c) => c.atLeast) };
}

/** 850 ms, 4.2 s, 3 m 12 s, 5 h 2 m, 3 d 4 h. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return '–';
  const neg = ms < 0;
  const a = Math.abs(ms);
  let s: string;
  if (a < 1_000) s = `${Math.round(a)} ms`;
  else if (a < 60_000) s = `${(a / 1_000).toFixed(a < 10_000 ? 1 : 0)} s`;
  else if (a < 3_600_000) s = `${Math.floor(a / 60_000)} m ${Math.floor((a % 60_000) / 1_000)} s`;
  else if (a < 86_400_000) s = `${Math.floor(a / 3_600_000)} h ${Math.floor((a % 3_600_000) / 60_000)} m`;
  else s = `${Math.floor(a / 86_400_000)} d ${Math.floor((a % 86_400_000) / 3_600_000)} h`;
  return neg ? `-${s}` : s;
}

/** "12 s ago" / "in 3 m 0 s", relative to this browser's clock. */
export function relative(iso: string | null | undefined, now = Date.now()): string {
  if (iso === null || iso === undefined) return '–';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const d = now - t;
  if (Math.abs(d) < 1_000) return 'now';
  return d >= 0 ? `${duration(d)} ago` : `in ${duration(-d)}`;
}

/** 2026-12-03 11:04:05.123 UTC: the exact time, for titles and detail fields. */
export function absolute(iso: string | null | undefined): string {
  if (iso === null || iso === undefined) return '–';
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return iso;
  return `${t.toISOString().replace('T', ' ').replace('Z', '')} UTC`;
}

export function json(v: unknown): string {
  if (v === undefined) return '–';
  try {
    return JSON.stringify(v, null, 2) ?? String(v);
  } catch {
    return String(v);
  }
}

export function shortId(id: string): string {
  return id.length > 14 ? `…${id.slice(-10)}` : id;
}
