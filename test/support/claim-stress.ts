import { appendFileSync } from 'node:fs';
import { sql } from 'kysely';
import { Ledger, type EnqueueInput } from '../../src/ledger/ledger.js';
import type { ClaimedItem } from '../../src/ledger/types.js';
import { retriesByErrno } from './conflicts.js';
import { createTestLedger, testTxnMode, type TestLedger } from './ledger.js';

/*
 * The claim stress suites' helpers (test/ledger-claim-stress-*.test.ts). Claims under contention, on whatever server
 * the suite targets (docs/design/states.md, docs/design/ledger-sql.md): many ledgers (each its own pool, so their
 * statements really overlap on separate connections) claim over one overlapping candidate set, over tiny queues burst
 * after burst, against laned completions that hand their lane on, and against the reclaim of expiring leases. None of
 * them may see an error, and every item is won by exactly one of them.
 *
 * A deadlock is no error to a caller (the ledger runs its victim again), so the conflicts the ledger retried
 * (conflictRetries, by errno) are read around each phase: on MariaDB two claims lock their rows in primary-key
 * order and cannot deadlock (nor, by the lock order of §8, do claims and completions), so no phase may retry a
 * 1213 at all. On TiDB (optimistic mode above all) a write conflict may be retried legitimately; there only
 * errors and exactly-once are checked. Only the tiny-queue test reaches the plan that deadlocked (see there):
 * without FORCE INDEX it retries 1213s and fails, and on 6495dec its claims throw them.
 *
 * Every test makes its own database. Randomness comes from one seed per test (LANEWAKE_STRESS_SEED repeats it; a
 * failure names it), though the servers' interleaving is never the same twice. With LANEWAKE_STRESS_RETRIES_FILE
 * set, each phase's retried conflicts (and how long it took, and what it did) are appended there as a JSON line.
 */

export function seedOf(): number {
  const fixed = process.env.LANEWAKE_STRESS_SEED;
  return fixed !== undefined && fixed !== '' ? Number(fixed) : Math.floor(Math.random() * 2 ** 31);
}

/** An integer in [lo, hi]. */
export const between = (random: () => number, lo: number, hi: number): number =>
  lo + Math.floor(random() * (hi - lo + 1));

/** `n` distinct elements of `from`, in random order. */
export function sample<T>(random: () => number, from: readonly T[], n: number): T[] {
  const copy = [...from];
  const out: T[] = [];
  while (out.length < n && copy.length > 0) out.push(...copy.splice(Math.floor(random() * copy.length), 1));
  return out;
}

/** A database of its own and `count` more ledgers on it, each with its own small pool; all closed and dropped after. */
export async function withLedgers<T>(count: number, fn: (tl: TestLedger, ledgers: Ledger[]) => Promise<T>): Promise<T> {
  const tl = await createTestLedger();
  const ledgers = Array.from({ length: count }, () => new Ledger({ url: tl.url, poolSize: 2, ...testTxnMode() }));
  try {
    return await fn(tl, ledgers);
  } finally {
    await Promise.allSettled(ledgers.map((l) => l.close()));
    await tl.drop();
  }
}

export async function enqueueAll(ledger: Ledger, inputs: readonly EnqueueInput[]): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < inputs.length; i += 500)
    ids.push(...(await ledger.enqueueMany(inputs.slice(i, i + 500))).map((r) => r.id));
  return ids;
}

/** A call that failed: which caller, doing what. Collected, never thrown mid-run, so every caller runs to the end. */
export interface Failure {
  who: string;
  what: string;
  error: unknown;
}

export function describeFailures(failures: readonly Failure[]): string[] {
  return failures
    .slice(0, 10)
    .map(
      (f) => `${f.who} ${f.what}: ${f.error instanceof Error ? (f.error.stack ?? f.error.message) : String(f.error)}`,
    );
}

/** The server family and, on TiDB, the transaction mode the suite runs (for the retries file). */
export async function serverLabel(ledger: Ledger): Promise<{ family: string; mode: string }> {
  const family = (await ledger.capabilities()).family;
  return { family, mode: family === 'tidb' ? (testTxnMode().tidbTxnMode ?? 'pessimistic') : '-' };
}

export function recordRetries(
  label: { family: string; mode: string },
  testName: string,
  phase: string,
  measured: { retried: ReadonlyMap<number, number>; ms: number },
  counts: () => Record<string, number> = () => ({}),
): void {
  const file = process.env.LANEWAKE_STRESS_RETRIES_FILE;
  if (file === undefined || file === '') return;
  const line = {
    test: testName,
    phase,
    ...label,
    ms: measured.ms,
    retried: retriesByErrno(measured.retried),
    ...counts(),
  };
  appendFileSync(file, `${JSON.stringify(line)}\n`);
}

/** Who won an item, and with which claim. */
export interface Win {
  who: string;
  /** Which call handed it out. */
  how: 'claim' | 'claimByIds' | 'with a completion';
  token: string;
  attempt: number;
  item: ClaimedItem;
}

/** Records wins; an id won twice (by anyone, in any phase) is kept aside as a duplicate. */
export class Wins {
  readonly byId = new Map<string, Win>();
  readonly duplicates: string[] = [];

  add(who: string, items: readonly ClaimedItem[], how: Win['how'] = 'claim'): void {
    for (const item of items) {
      const earlier = this.byId.get(item.id);
      if (earlier !== undefined) {
        this.duplicates.push(
          `${item.id}: won by ${earlier.who} (attempt ${earlier.attempt}) and by ${who} (attempt ${item.attempt})`,
        );
        continue;
      }
      this.byId.set(item.id, { who, how, token: item.leaseToken, attempt: item.attempt, item });
    }
  }
}

/** The queue's rows as the ledger has them now. */
export async function rowsOf(ledger: Ledger, queue: string) {
  const r = await sql<{
    id: string;
    state: string;
    lease_token: string | null;
    lease_owner: string | null;
    attempt: number;
  }>`SELECT id, state,
      lease_token, lease_owner, attempt FROM ${ledger.tables.items} WHERE queue = ${queue}`.execute(ledger.db);
  return new Map(r.rows.map((row) => [row.id, { ...row, attempt: Number(row.attempt) }]));
}
