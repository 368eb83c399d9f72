/**
 * Counts the round trips this process sends over mysql2, as
 * test/support/sql-recorder.ts observes them: every query/execute call is one
 * request and one answer on the wire (the ledger's pool sends several
 * statements in one query, so statements and round trips are counted apart).
 * The driver is observed, not replaced: each call goes on to the real query.
 *
 * Each round trip is filed under the current phase (set by the workload) and
 * a shape: its statements' names joined by " ; " (`statementName`).
 */
import { onEveryStatement } from '../test/support/mysql-statements.js';
import { normalizeSql } from '../test/support/sql-lint.js';

/** What a round trip belongs to, from its statements: the path it serves. */
export type RoundTripKind = 'enqueue' | 'claim' | 'complete' | 'session' | 'other';

export interface ShapeCount {
  shape: string;
  kind: RoundTripKind;
  statements: number;
  count: number;
}

interface Rule {
  test: RegExp;
  name: string;
  kind: RoundTripKind | 'tx';
}

// Matched against normalizeSql's text (literals '?', numbers 0) with table prefixes removed.
const RULES: readonly Rule[] = [
  { test: /^(START TRANSACTION|begin)$/i, name: 'BEGIN', kind: 'tx' },
  { test: /^COMMIT$/, name: 'COMMIT', kind: 'tx' },
  { test: /^commit$/, name: 'commit', kind: 'tx' },
  { test: /^ROLLBACK/i, name: 'ROLLBACK', kind: 'tx' },
  { test: /^SET SESSION/i, name: 'SET SESSION …', kind: 'session' },
  { test: /^INSERT INTO items /, name: 'INSERT items', kind: 'enqueue' },
  { test: /^INSERT INTO lanes .*ON DUPLICATE KEY UPDATE/, name: 'upsert lanes (reserve sequences)', kind: 'enqueue' },
  { test: /^SELECT queue, lane, next_seq, active FROM lanes/, name: 'read lanes (sequences)', kind: 'enqueue' },
  { test: /^SELECT id, queue, idempotency_key, lane_seq FROM items/, name: 'read idempotency keys', kind: 'enqueue' },
  { test: /^\(SELECT id, priority, run_after FROM items/, name: 'candidate read', kind: 'claim' },
  { test: /^UPDATE items SET state = '\?', lease_token/, name: 'claim CAS', kind: 'claim' },
  {
    test: /^SELECT id, queue, type, lane, lane_seq, queue_class, priority, payload/,
    name: 'claim read-back',
    kind: 'claim',
  },
  { test: /^UPDATE lanes SET active = active -/, name: 'lanes active - 1', kind: 'complete' },
  { test: /^UPDATE items SET state = '\?', result = /, name: 'completion CAS', kind: 'complete' },
  { test: /^SELECT queue, lane, active FROM lanes/, name: 'read lanes (active)', kind: 'complete' },
  {
    test: /^SELECT id, queue, lane, type, queue_class, run_after <= NOW\(6\) AS due/,
    name: 'find lane successors',
    kind: 'complete',
  },
  { test: /^UPDATE items SET is_head = 0, updated_at/, name: 'successor becomes head', kind: 'complete' },
  { test: /^UPDATE items SET is_head = 0, state = '\?'/, name: 'successor claimed (head + lease)', kind: 'complete' },
  { test: /^SELECT VERSION\(\)/i, name: 'SELECT VERSION()', kind: 'other' },
];

const TABLES = /`[A-Za-z0-9_$]*?(items|lanes|attempts|waits|wake_marks|ownership|migrations)`/g;

/** One statement's name: a known shape of the ledger's, else its first 70 normalized characters. */
export function statementName(text: string): { name: string; kind: RoundTripKind | 'tx' } {
  const s = normalizeSql(text).replace(TABLES, '$1');
  for (const r of RULES) if (r.test.test(s)) return { name: r.name, kind: r.kind };
  return { name: s.length > 70 ? `${s.slice(0, 70)}…` : s, kind: 'other' };
}

/** A round trip's statements (split where the pipeline joins them, after literals are gone). */
function shapeOf(text: string): { shape: string; kind: RoundTripKind; statements: number } {
  const parts = normalizeSql(text)
    .split(/;\s*/)
    .map((p) => p.trim())
    .filter((p) => p !== '');
  const named = parts.map(statementName);
  const shape = named.map((n) => n.name).join(' ; ');
  // A COMMIT alone ends a pipelined transaction (sql/pipeline.ts), which only the laned enqueue
  // (its COMMIT rides with the INSERT) and the laned completion use; Kysely's own transactions say `commit`.
  if (shape === 'COMMIT') return { shape, kind: 'complete', statements: 1 };
  const kind = named.find((n) => n.kind !== 'tx')?.kind ?? 'other';
  return { shape, kind: kind === 'tx' ? 'other' : kind, statements: parts.length };
}

const byPhase = new Map<string, Map<string, ShapeCount>>();
const shapeCache = new Map<string, { shape: string; kind: RoundTripKind; statements: number }>();
let phase = 'setup';
let installed = false;

/** Files every round trip from now on under `name`. */
export function setPhase(name: string): void {
  phase = name;
}

let countingNs = 0n;

/** This process's time spent counting so far (ns): the counter's own CPU, for a benchmark to take off its own. */
export function countingTimeNs(): number {
  return Number(countingNs);
}

function record(text: string): void {
  const startedAt = process.hrtime.bigint();
  try {
    fileRoundTrip(text);
  } finally {
    countingNs += process.hrtime.bigint() - startedAt;
  }
}

function fileRoundTrip(text: string): void {
  // Round trips of one shape differ in their literals: key the cache on how each
  // statement begins (a ';' inside a literal only costs a cache miss).
  const key =
    text.length > 200
      ? text
          .split(';')
          .map((p) => p.trimStart().slice(0, 60))
          .join(';')
      : text;
  let s = shapeCache.get(key);
  if (s === undefined) {
    s = shapeOf(text);
    if (shapeCache.size < 5000) shapeCache.set(key, s);
  }
  let shapes = byPhase.get(phase);
  if (shapes === undefined) byPhase.set(phase, (shapes = new Map()));
  const c = shapes.get(s.shape);
  if (c) c.count++;
  else shapes.set(s.shape, { ...s, count: 1 });
}

/** Counts every statement this process sends from now on (once per process). */
export function installRoundTripCounter(): void {
  if (installed) return;
  installed = true;
  onEveryStatement(record);
}

/** The round trips filed under `name`, most frequent first; the phase is then forgotten. */
export function takePhase(name: string): ShapeCount[] {
  const shapes = byPhase.get(name);
  byPhase.delete(name);
  return [...(shapes?.values() ?? [])].sort((a, b) => b.count - a.count);
}

export type KindTotals = Record<RoundTripKind, number>;

export function totalsByKind(shapes: readonly ShapeCount[]): KindTotals {
  const t: KindTotals = { enqueue: 0, claim: 0, complete: 0, session: 0, other: 0 };
  for (const s of shapes) t[s.kind] += s.count;
  return t;
}
