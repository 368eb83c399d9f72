import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { Executor, LedgerDb } from '../../connection.js';
import { retryOnConflict } from '../../retry.js';
import { affected } from './fragments.js';
import { beginLockingEarly, transactionOn } from './lock-early.js';

/** What one statement of a round trip answered. */
export interface StatementResult<R = Record<string, unknown>> {
  rows: R[];
  affected: number;
}

/**
 * Sends statements as one round trip and answers each one's result, in
 * order. `commit: true` commits the transaction with this round trip.
 */
export type Send = (
  statements: readonly RawBuilder<unknown>[],
  opts?: { commit?: boolean },
) => Promise<StatementResult[]>;

/**
 * A transaction whose statements go out in as few round trips as the
 * connection allows. On a connection that takes several statements per
 * query (the ledger's own pool), BEGIN rides with the first round trip and
 * COMMIT with the last, so a transaction of two dependent steps costs two
 * round trips instead of one per statement plus two. Every round trip here
 * costs a wake-up of the process on each side, and under load a wait in
 * line behind other work, which is what enqueue→start latency is made of.
 *
 * Without multi-statement queries (a Kysely instance handed in), each
 * statement is its own round trip inside an ordinary Kysely transaction.
 * A failure rolls back either way. After the first `send`, `exec` runs
 * statements in the same transaction, one round trip each, for the rare
 * paths not worth pipelining.
 */
export async function pipelined<T>(
  db: LedgerDb,
  caps: LedgerCapabilities,
  body: (send: Send, exec: Executor) => Promise<T>,
  opts: { lockEarly?: boolean } = {},
): Promise<T> {
  const begin = opts.lockEarly ? beginLockingEarly : sql`START TRANSACTION`;
  if (!caps.multiStatement) {
    return transactionOn(db, opts.lockEarly === true, (trx) => body((statements) => sendEachOn(trx, statements), trx));
  }
  return db.connection().execute(async (conn) => {
    let begun = false;
    let committed = false;
    const send: Send = async (statements, opts = {}) => {
      if (committed) throw new Error('pipelined transaction: already committed');
      const all = [...(begun ? [] : [begin]), ...statements, ...(opts.commit ? [sql`COMMIT`] : [])];
      const skip = begun ? 0 : 1;
      begun = true;
      if (opts.commit) committed = true;
      const results = await sendTogether(conn, all);
      return results.slice(skip, skip + statements.length);
    };
    try {
      const value = await body(send, conn);
      if (begun && !committed) await send([], { commit: true });
      return value;
    } catch (error) {
      // A statement failed mid-query: the ones after it did not run, the transaction is open.
      if (begun) await sql`ROLLBACK`.execute(conn).catch(() => undefined);
      throw error;
    }
  });
}

/** A pipelined transaction run again on a conflict, inside the ledger; its retries lock early (lock-early.ts). */
export function retryPipelined<T>(
  db: LedgerDb,
  caps: LedgerCapabilities,
  body: (send: Send, exec: Executor) => Promise<T>,
): Promise<T> {
  return retryOnConflict((attempt) => pipelined(db, caps, body, { lockEarly: attempt > 1 }));
}

/** A Send on an executor (a transaction the caller owns): each statement its own round trip. */
export function sendEach(exec: Executor): Send {
  return (statements) => sendEachOn(exec, statements);
}

async function sendEachOn(exec: Executor, statements: readonly RawBuilder<unknown>[]): Promise<StatementResult[]> {
  const out: StatementResult[] = [];
  for (const s of statements) {
    const r = await s.execute(exec);
    out.push({ rows: r.rows as Record<string, unknown>[], affected: affected(r) });
  }
  return out;
}

/** mysql2 answers a multi-statement query with one entry per statement: a header for a write, rows for a read. */
async function sendTogether(exec: Executor, statements: readonly RawBuilder<unknown>[]): Promise<StatementResult[]> {
  if (statements.length === 0) return [];
  const r = await sql`${sql.join(statements, sql`; `)}`.execute(exec);
  if (statements.length === 1) return [{ rows: r.rows as Record<string, unknown>[], affected: affected(r) }];
  const parts = r.rows as unknown as unknown[];
  return parts.map((p) =>
    Array.isArray(p)
      ? { rows: p as Record<string, unknown>[], affected: 0 }
      : { rows: [], affected: Number((p as { affectedRows?: number }).affectedRows ?? 0) },
  );
}
