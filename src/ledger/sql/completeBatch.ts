import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import { retryOnConflict } from '../retry.js';
import type { LedgerTables } from '../tables.js';
import { affected, list, type Executor } from './common.js';
import { finalize, type LeaseHandle } from './finalize.js';
import { advanceHead } from './transition.js';

export interface CompletionEntry {
  handle: LeaseHandle;
  resultJson: string | null;
}

/**
 * Completes many claimed items in one transaction with a fixed number of
 * statements, whatever the batch size: each item is still a CAS on its own
 * (id, lease token, processing), and each laned winner still hands its lane
 * to the next item in the same transaction. Returns, per entry, whether it won.
 *
 * Items that need an attempt-history row (not a first-try success), or whose
 * lane appears twice in the batch, go through the single-item path.
 */
export async function completeMany(db: LedgerDb, t: LedgerTables, entries: readonly CompletionEntry[]): Promise<boolean[]> {
  const won = new Array<boolean>(entries.length).fill(false);
  const batch: number[] = [];
  const single: number[] = [];
  const laneSeen = new Set<string>();
  entries.forEach((e, i) => {
    const lk = e.handle.lane === null ? null : laneKey(e.handle.queue, e.handle.lane);
    if (e.handle.attempt > 1 || (lk !== null && laneSeen.has(lk))) single.push(i);
    else {
      if (lk !== null) laneSeen.add(lk);
      batch.push(i);
    }
  });

  if (batch.length > 0) {
    const items = batch.map((i) => entries[i]!);
    // Without lanes the batch is one UPDATE: atomic on its own, no transaction round trips.
    const run = items.some((e) => e.handle.lane !== null)
      ? () => db.transaction().execute((trx) => completeBatchInTx(trx, t, items))
      : () => completeBatchInTx(db, t, items);
    try {
      await retryOnConflict(run);
      for (const i of batch) won[i] = true;
    } catch (error) {
      if (!(error instanceof PartialBatch)) throw error;
      single.push(...batch);
    }
  }
  for (const i of single) {
    const e = entries[i]!;
    won[i] = await finalize(db, t, e.handle, { kind: 'complete', resultJson: e.resultJson });
  }
  return won;
}

class PartialBatch extends Error {}

async function completeBatchInTx(trx: Executor, t: LedgerTables, entries: readonly CompletionEntry[]): Promise<void> {
  const laned = entries.filter((e) => e.handle.lane !== null);
  const lanePairs = (es: readonly CompletionEntry[]) => sql.join(es.map((e) => sql`(${e.handle.queue}, ${e.handle.lane})`));
  // Lane rows first, the order every lane-touching transaction uses.
  if (laned.length > 0) {
    await sql`UPDATE ${t.lanes} SET active = active - 1 WHERE (queue, lane) IN (${lanePairs(laned)})`.execute(trx);
  }

  const ids = entries.map((e) => e.handle.id);
  const withResult = entries.filter((e) => e.resultJson !== null);
  const resultExpr =
    withResult.length === 0
      ? sql`NULL`
      : sql`CASE id ${sql.join(withResult.map((e) => sql`WHEN ${e.handle.id} THEN ${e.resultJson}`), sql` `)} ELSE NULL END`;
  // Items of one claim share its token: then a plain equality does, which
  // MariaDB plans far more cheaply than a list of (id, token) pairs.
  const tokens = new Set(entries.map((e) => e.handle.leaseToken));
  const [onlyToken] = tokens;
  const tokenGuard =
    tokens.size === 1
      ? sql`lease_token = ${onlyToken}`
      : sql`(id, lease_token) IN (${sql.join(entries.map((e) => sql`(${e.handle.id}, ${e.handle.leaseToken})`))})`;
  const r = await sql`UPDATE ${t.items}
    SET state = 'completed', result = ${resultExpr}, lease_until = NULL, terminal_at = NOW(6), updated_at = NOW(6)
    WHERE id IN (${list(ids)}) AND state = 'processing' AND ${tokenGuard}`.execute(trx);

  // Someone lost their lease: undo this batch and let each item CAS on its own,
  // which tells exactly who won. Rare (expired leases), so the slow path is fine.
  if (affected(r) !== entries.length) throw new PartialBatch();
  if (laned.length > 0) await advanceHeads(trx, t, laned);
}

/**
 * Hands each finished head's lane to its successor. Sequences are gap free,
 * so the successor is almost always `lane_seq + 1`: one statement for all
 * lanes. Lanes that still have unfinished items but whose `lane_seq + 1` was
 * not pending (it was cancelled while waiting) fall back to the scan.
 */
async function advanceHeads(trx: Executor, t: LedgerTables, done: readonly CompletionEntry[]): Promise<void> {
  const active = await sql<{ queue: string; lane: string; active: number }>`
    SELECT queue, lane, active FROM ${t.lanes}
    WHERE (queue, lane) IN (${sql.join(done.map((e) => sql`(${e.handle.queue}, ${e.handle.lane})`))})`.execute(trx);
  const busy = new Set(active.rows.filter((r) => Number(r.active) > 0).map((r) => laneKey(r.queue, r.lane)));
  const expecting = done.filter((e) => busy.has(laneKey(e.handle.queue, e.handle.lane ?? '')));
  if (expecting.length === 0) return;
  // Row-constructor IN: MariaDB plans it as a range on ix_lane in a SELECT but
  // as a full scan in an UPDATE, so find the ids first, then update by key.
  const next = await sql<{ id: string }>`SELECT id FROM ${t.items} FORCE INDEX (ix_lane)
    WHERE (queue, lane, lane_seq) IN (${sql.join(
      expecting.map((e) => sql`(${e.handle.queue}, ${e.handle.lane}, ${(e.handle.laneSeq ?? 0) + 1})`),
    )}) AND state = 'pending'`.execute(trx);
  if (next.rows.length > 0) {
    await sql`UPDATE ${t.items} SET is_head = 1, updated_at = NOW(6)
      WHERE id IN (${list(next.rows.map((r) => r.id))}) AND state = 'pending'`.execute(trx);
  }
  if (next.rows.length === expecting.length) return;
  for (const e of expecting) {
    await advanceHead(trx, t, { queue: e.handle.queue, lane: e.handle.lane, laneSeq: e.handle.laneSeq });
  }
}

function laneKey(queue: string, lane: string): string {
  return `${queue}\u0000${lane}`;
}
