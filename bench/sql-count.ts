/**
 * Counts the round trips and statements this process sends over mysql2, as test/support/sql-recorder.ts observes
 * them: every query/execute call is one request and one answer on the wire (the ledger's pool sends several
 * statements in one query, so the two are counted apart). The driver is observed, not replaced. Each round trip is
 * filed under the current phase, set by the workload (bench/workloads/cost-phases.ts, bench/workloads/shapes.ts).
 */
import { onEveryStatement } from '../test/support/mysql-statements.js';
import { normalizeSql } from '../test/support/sql-lint.js';

export interface PhaseCount {
  roundTrips: number;
  statements: number;
}

const byPhase = new Map<string, PhaseCount>();
/** Statements per round trip, keyed on how each statement begins (round trips of one shape differ in literals). */
const statementsOf = new Map<string, number>();
let phase = 'setup';
let installed = false;
let countingNs = 0n;

/** Files every round trip from now on under `name`. */
export function setPhase(name: string): void {
  phase = name;
}

/** This process's time spent counting so far (ns): the counter's own CPU, for a benchmark to take off its own. */
export function countingTimeNs(): number {
  return Number(countingNs);
}

function record(text: string): void {
  const startedAt = process.hrtime.bigint();
  const key =
    text.length > 200
      ? text
          .split(';')
          .map((p) => p.trimStart().slice(0, 60))
          .join(';')
      : text;
  let statements = statementsOf.get(key);
  if (statements === undefined) {
    // Split after literals are gone, so a ';' inside one does not count.
    statements = normalizeSql(text)
      .split(/;\s*/)
      .filter((p) => p.trim() !== '').length;
    if (statementsOf.size < 5000) statementsOf.set(key, statements);
  }
  const c = byPhase.get(phase) ?? { roundTrips: 0, statements: 0 };
  byPhase.set(phase, { roundTrips: c.roundTrips + 1, statements: c.statements + statements });
  countingNs += process.hrtime.bigint() - startedAt;
}

/** Counts every statement this process sends from now on (once per process). */
export function installRoundTripCounter(): void {
  if (installed) return;
  installed = true;
  onEveryStatement(record);
}

/** What was filed under `name`; the phase is then forgotten. */
export function takePhase(name: string): PhaseCount {
  const c = byPhase.get(name) ?? { roundTrips: 0, statements: 0 };
  byPhase.delete(name);
  return c;
}
