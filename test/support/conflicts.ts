import { conflictRetries } from '../../src/ledger/retry.js';

/** MariaDB and MySQL's ER_LOCK_DEADLOCK: the server rolled a statement's transaction back as a deadlock's victim. */
export const ER_LOCK_DEADLOCK = 1213;

/** TiDB's write conflict: a transaction lost at COMMIT (optimistic) to one that wrote its rows after it began. */
export const TIDB_WRITE_CONFLICT = 9007;

/**
 * The conflicts the ledger retried in this process (src/ledger/retry.ts,
 * conflictRetries) while `fn` ran, by errno: a retried deadlock is no error
 * to the caller, so this is where it shows. Only meaningful while nothing
 * else in the process uses a ledger (the tests of a file run one at a time).
 */
export async function conflictsRetriedDuring<T>(
  fn: () => Promise<T>,
): Promise<{ value: T; retried: Map<number, number>; ms: number }> {
  const before = conflictRetries();
  const started = performance.now();
  const value = await fn();
  const ms = Math.round(performance.now() - started);
  const after = conflictRetries();
  const retried = new Map<number, number>();
  for (const [n, count] of after) {
    const d = count - (before.get(n) ?? 0);
    if (d > 0) retried.set(n, d);
  }
  return { value, retried, ms };
}

/** Adds `more` into `into`, errno by errno. */
export function addRetries(into: Map<number, number>, more: ReadonlyMap<number, number>): void {
  for (const [n, count] of more) into.set(n, (into.get(n) ?? 0) + count);
}

/** `{ "1213": 2, ... }`, for an assertion's message and an expectation. */
export function retriesByErrno(m: ReadonlyMap<number, number>): Record<string, number> {
  return Object.fromEntries([...m].sort(([a], [b]) => a - b).map(([n, c]) => [String(n), c]));
}
