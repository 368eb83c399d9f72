import { sql, type RawBuilder } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { QUEUE_CLASSES, type QueueClass } from '../../types.js';
import type { DeadFilter } from '../../operator-types.js';
import { list } from '../common/fragments.js';
import { TYPE_KEY_SEPARATOR } from '../keys/scope.js';

/** A dead item a bulk replay may re-drive, with the guard the replay checks (sql/operator/replay.ts). */
export interface DeadCandidate {
  id: string;
  attempt: number;
  errorDigest: string;
  queueClass: QueueClass;
}

/**
 * Dead items of the filter not replayed yet that ended by `endedBy` (the
 * start of the bulk replay, so the replays that die meanwhile are not
 * taken again), read from the queue's dead range of ix_claim.
 */
function deadScope(f: DeadFilter, endedBy: string): RawBuilder<unknown> {
  const parts = [
    sql`queue = ${f.queue} AND queue_class IN (${list(
      QUEUE_CLASSES,
    )}) AND state = 'dead' AND replayed_at IS NULL AND terminal_at <= ${endedBy}`,
  ];
  if (f.type !== undefined) parts.push(sql`type = ${f.type}`);
  if (f.failureClass !== undefined) parts.push(sql`failure_class = ${f.failureClass}`);
  if (f.lane !== undefined) parts.push(sql`lane = ${f.lane}`);
  if (f.key !== undefined)
    parts.push(sql`concurrency_key IN (${f.key}, CONCAT(type, ${TYPE_KEY_SEPARATOR}, ${f.key}))`);
  return sql.join(parts, sql` AND `);
}

/** The next `limit` candidates after id `afterId`, in id order. */
export async function deadCandidates(
  exec: Executor,
  t: LedgerTables,
  f: DeadFilter,
  endedBy: string,
  afterId: string,
  limit: number,
): Promise<DeadCandidate[]> {
  const r = await sql<{
    id: string;
    attempt: number;
    digest: string;
    queue_class: string;
  }>`SELECT id, attempt, queue_class, SHA2(COALESCE(last_error, ''), 256) AS digest
    FROM ${t.items} WHERE ${deadScope(f, endedBy)} AND id > ${afterId} ORDER BY id LIMIT ${limit}`.execute(exec);
  return r.rows.map((row) => ({
    id: row.id,
    attempt: Number(row.attempt),
    errorDigest: String(row.digest),
    queueClass: row.queue_class as QueueClass,
  }));
}

/** How many candidates there are now (a bulk replay's dry run). */
export async function countDeadCandidates(
  exec: Executor,
  t: LedgerTables,
  f: DeadFilter,
  endedBy: string,
): Promise<number> {
  const r = await sql<{
    n: number | string;
  }>`SELECT COUNT(*) AS n FROM ${t.items} WHERE ${deadScope(f, endedBy)}`.execute(exec);
  return Number(r.rows[0]?.n ?? 0);
}

/** The ledger's now, as text with microseconds: a bound later statements compare with. */
export async function ledgerNowText(exec: Executor): Promise<string> {
  const r = await sql<{ now: string }>`SELECT DATE_FORMAT(NOW(6), '%Y-%m-%d %H:%i:%s.%f') AS now`.execute(exec);
  const now = r.rows[0]?.now;
  if (now === undefined) throw new Error('ledger clock: no answer');
  return String(now);
}
