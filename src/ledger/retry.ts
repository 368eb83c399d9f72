import type { Transaction } from 'kysely';
import { CommitOutcomeUnknownError, ConflictRetriesExhaustedError } from '../errors.js';
import { sleep } from '../sleep.js';
import type { LedgerDb } from './connection.js';
import { beginLockingEarly, transactionOn } from './sql/common/lock-early.js';

/**
 * Errors after which the whole transaction may simply run again:
 * MySQL/MariaDB deadlock (1213) and lock-wait timeout (1205); TiDB write
 * conflict (9007), optimistic-commit conflict (8002), retryable KV error
 * (8022), schema out of date or changed while the statement ran (8027, 8028).
 */
const RETRYABLE_ERRNOS = new Set([1213, 1205, 9007, 8002, 8022, 8027, 8028]);

export function errno(error: unknown): number | undefined {
  if (typeof error === 'object' && error !== null && 'errno' in error) {
    const n = (error as { errno: unknown }).errno;
    return typeof n === 'number' ? n : undefined;
  }
  return undefined;
}

/**
 * TiDB gives up on a pessimistic statement that kept meeting newer commits
 * of the rows it locks (its max-retry-count, 256) with a plain 1105 error
 * of this text; the statement wrote nothing, and running the transaction
 * again is the remedy, as after a deadlock.
 */
const TIDB_LOCK_RETRY_LIMIT = /pessimistic lock retry limit reached/;
const ER_UNKNOWN_ERROR = 1105;

/**
 * Conflicts the ledger ran a statement or transaction again for, in this
 * process, by the server's errno: a deadlock or write conflict costs a retry,
 * not an error, so this is where one shows (tests and metrics read it).
 */
const conflictsRetried = new Map<number, number>();

/** A snapshot of the conflicts retried so far in this process, by errno. */
export function conflictRetries(): ReadonlyMap<number, number> {
  return new Map(conflictsRetried);
}

export function countConflict(error: unknown): void {
  const n = errno(error) ?? 0;
  conflictsRetried.set(n, (conflictsRetried.get(n) ?? 0) + 1);
}

export function isRetryableConflict(error: unknown): boolean {
  const n = errno(error);
  if (n === undefined) return false;
  if (RETRYABLE_ERRNOS.has(n)) return true;
  return n === ER_UNKNOWN_ERROR && TIDB_LOCK_RETRY_LIMIT.test(String((error as { message?: unknown }).message));
}

/**
 * The connection is gone (killed by the server or an operator, reset, timed
 * out, the server shutting down), so is whatever transaction it had open:
 * mysql2's codes for a lost socket, the client errors 2006/2013, MariaDB's
 * ER_CONNECTION_KILLED (1927), ER_SERVER_SHUTDOWN (1053), MySQL's
 * ER_CLIENT_INTERACTION_TIMEOUT (4031), the server's network errors
 * (1158-1161), and mysql2's refusal to use a connection it already knows
 * is closed. The pool drops such a connection, so the next one is fresh.
 */
const CONNECTION_CODES = new Set([
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'PROTOCOL_ENQUEUE_AFTER_FATAL_ERROR',
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ER_CONNECTION_KILLED',
  'ER_SERVER_SHUTDOWN',
  'ER_CLIENT_INTERACTION_TIMEOUT',
]);
const CONNECTION_ERRNOS = new Set([2006, 2013, 1927, 1053, 4031, 1158, 1159, 1160, 1161]);
const CLOSED_CONNECTION = new RegExp(
  [
    "Can't add new command when connection is in closed state",
    "Can't write in closed state",
    'Connection lost: The server closed the connection',
  ].join('|'),
);

export function isConnectionError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && CONNECTION_CODES.has(code)) return true;
  const n = errno(error);
  if (n !== undefined && CONNECTION_ERRNOS.has(n)) return true;
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' && CLOSED_CONNECTION.test(message);
}

export const ER_DUP_ENTRY = 1062;
/** The table does not exist (a ledger on an older schema). */
export const ER_NO_SUCH_TABLE = 1146;

export interface RetryPolicy {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 8, baseDelayMs: 5, maxDelayMs: 250 };

/**
 * A claim's CAS that conflicts lost its rows to another claim that won them:
 * the fleet moved on, so a claim tries longer than other writes before its
 * consumer hears of it. On TiDB, where claims come back with their write
 * conflicts (sql/claim/cas.ts), eight prefetching consumers starting on one
 * backlog at once ran out of eight tries.
 */
export const CLAIM_RETRY: RetryPolicy = { maxAttempts: 24, baseDelayMs: 5, maxDelayMs: 100 };

/**
 * How often a ledger write runs again on a fresh connection after its
 * connection was lost, and the most it waits in between (full jitter): a
 * killed connection needs one retry; a server that is restarting gets about
 * three seconds before the error is the caller's.
 */
export const CONNECTION_RETRY: RetryPolicy = { maxAttempts: 6, baseDelayMs: 20, maxDelayMs: 1000 };

/** The pause before run `attempt + 1`: full jitter under an exponential cap. */
export function retryDelay(policy: RetryPolicy, attempt: number): Promise<void> {
  return sleep(Math.random() * Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1)), {
    keepAlive: true,
  });
}

/**
 * Runs `fn` until it succeeds, retrying (bounded, with full jitter) while it
 * fails with a retryable conflict or one the caller declares retryable.
 */
export async function retryOnConflict<T>(
  fn: (attempt: number) => Promise<T>,
  policy: RetryPolicy = DEFAULT_RETRY,
  extraRetryable: (error: unknown) => boolean = () => false,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (error) {
      if (!isRetryableConflict(error) && !extraRetryable(error)) throw error;
      if (attempt >= policy.maxAttempts) throw new ConflictRetriesExhaustedError(attempt, error);
      if (isRetryableConflict(error)) countConflict(error);
      await retryDelay(policy, attempt);
    }
  }
}

/**
 * `body` in a transaction of its own, run again (retryOnConflict) on a
 * conflict or an error `extraRetryable` names; each run after the first
 * locks early (sql/common/lock-early.ts).
 */
export function retryTransaction<T>(
  db: LedgerDb,
  body: (trx: Transaction<Record<string, never>>) => Promise<T>,
  extraRetryable?: (error: unknown) => boolean,
): Promise<T> {
  return retryOnConflict((attempt) => transactionOn(db, attempt > 1, body), DEFAULT_RETRY, extraRetryable);
}

/**
 * Reads the ledger after a write whose answer was lost with its connection,
 * retrying the read itself on a fresh connection. Throws
 * CommitOutcomeUnknownError when even that keeps failing.
 */
export async function readAfterLostConnection<T>(read: () => Promise<T>, lost: unknown): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await read();
    } catch (error) {
      if (!isConnectionError(error)) throw error;
      if (attempt >= CONNECTION_RETRY.maxAttempts) throw new CommitOutcomeUnknownError(lost);
      await retryDelay(CONNECTION_RETRY, attempt);
    }
  }
}

/**
 * Runs `body` in a transaction on `db` and commits it. Runs it again, on a
 * fresh connection, when it fails before COMMIT with a retryable conflict
 * (up to DEFAULT_RETRY) or a lost connection (up to CONNECTION_RETRY): the
 * failed run rolled back, so `body` may run more than once, and only one
 * run's writes ever commit.
 *
 * When the connection is lost during COMMIT the transaction may or may not
 * have committed. `committed` then reads the ledger to tell (it must wait
 * for the lost session's transaction to end, e.g. with a locking read of a
 * row the transaction wrote): true returns this run's value, false runs the
 * transaction again, undefined (it cannot tell), like a missing `committed`,
 * throws CommitOutcomeUnknownError.
 */
export async function runTransaction<T>(
  db: LedgerDb,
  body: (trx: Transaction<Record<string, never>>) => Promise<T>,
  committed?: () => Promise<boolean | undefined>,
  opts: { bodyLocksEarly?: boolean } = {},
): Promise<T> {
  let conflicts = 0;
  let lost = 0;
  for (;;) {
    const trx = await db
      .startTransaction()
      .execute()
      .catch((error: unknown) => ({ failed: error }));
    if ('failed' in trx) {
      if (!isConnectionError(trx.failed) || ++lost >= CONNECTION_RETRY.maxAttempts) throw trx.failed;
      await retryDelay(CONNECTION_RETRY, lost);
      continue;
    }
    /**
     * A conflict rolled this run back (in the body, or a TiDB write conflict refused at COMMIT): wait, then run again.
     */
    const afterConflict = async (error: unknown): Promise<void> => {
      if (++conflicts >= DEFAULT_RETRY.maxAttempts) throw new ConflictRetriesExhaustedError(conflicts, error);
      countConflict(error);
      await retryDelay(DEFAULT_RETRY, conflicts);
    };
    let value: T;
    try {
      // A run after a conflict locks early (sql/common/lock-early.ts), so it does not lose to the same writers again,
      // unless every run of the body begins that way itself (in its first round trip).
      if (conflicts > 0 && opts.bodyLocksEarly !== true) await beginLockingEarly.execute(trx);
      value = await body(trx);
    } catch (error) {
      await trx
        .rollback()
        .execute()
        .catch(() => undefined);
      if (isRetryableConflict(error)) {
        await afterConflict(error);
        continue;
      }
      if (!isConnectionError(error) || ++lost >= CONNECTION_RETRY.maxAttempts) throw error;
      await retryDelay(CONNECTION_RETRY, lost);
      continue;
    }
    try {
      await trx.commit().execute();
      return value;
    } catch (error) {
      // A failed COMMIT leaves the connection lent out: the rollback gives it back.
      await trx
        .rollback()
        .execute()
        .catch(() => undefined);
      if (isRetryableConflict(error)) {
        await afterConflict(error);
        continue;
      }
      if (!isConnectionError(error)) throw error;
      const outcome = committed === undefined ? undefined : await readAfterLostConnection(committed, error);
      if (outcome === undefined) throw new CommitOutcomeUnknownError(error);
      if (outcome) return value;
      if (++lost >= CONNECTION_RETRY.maxAttempts) throw error;
    }
  }
}
