import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import { affected, list } from './common.js';
import { applyTransition } from './transition.js';

export interface WokenItem {
  id: string;
  queue: string;
  lane: string | null;
}

/**
 * Every item blocked on `key` goes back to pending, due now. Call it after
 * the awaited fact has committed. Returns the items it moved, to wake their
 * consumers.
 */
export async function wakeDependency(db: LedgerDb, t: LedgerTables, opts: { key: string; queue?: string | undefined }): Promise<WokenItem[]> {
  const queueFilter = opts.queue === undefined ? sql`` : sql`AND queue = ${opts.queue}`;
  const rows = await sql<WokenItem>`SELECT id, queue, lane FROM ${t.items}
    WHERE dependency_key = ${opts.key} AND state = 'blocked' ${queueFilter}`.execute(db);
  if (rows.rows.length === 0) return [];
  const r = await sql`UPDATE ${t.items}
    SET state = 'pending', run_after = NOW(6), probe_after = NULL, block_expires_at = NULL, blocked_at = NULL,
      updated_at = NOW(6)
    WHERE id IN (${list(rows.rows.map((x) => x.id))}) AND state = 'blocked' AND dependency_key = ${opts.key}`.execute(db);
  if (affected(r) === rows.rows.length) return rows.rows;
  // Some changed under us (cancelled, probed): report only what this call moved.
  const moved = await sql<{ id: string }>`SELECT id FROM ${t.items}
    WHERE id IN (${list(rows.rows.map((x) => x.id))}) AND state <> 'blocked'`.execute(db);
  const ids = new Set(moved.rows.map((m) => m.id));
  return rows.rows.filter((x) => ids.has(x.id));
}

export interface ProbeOutcome {
  /** Due for a probe: back to pending so the handler checks its dependency again. */
  probed: WokenItem[];
  /** Waited past maxWait: dead, class `dependency_expired`. */
  expired: string[];
}

/** Blocked items whose probe time has come: expire those past their max wait, release the rest to be re-checked. */
export async function probeDependencyWaits(db: LedgerDb, t: LedgerTables, opts: { queue?: string | undefined; limit: number }): Promise<ProbeOutcome> {
  const queueFilter = opts.queue === undefined ? sql`` : sql`AND queue = ${opts.queue}`;
  const rows = await sql<{
    id: string;
    queue: string;
    lane: string | null;
    lane_seq: number | null;
    dependency_key: string;
    expired: number;
  }>`SELECT id, queue, lane, lane_seq, dependency_key, (block_expires_at <= NOW(6)) AS expired
    FROM ${t.items} WHERE probe_after <= NOW(6) AND state = 'blocked' ${queueFilter}
    ORDER BY probe_after LIMIT ${opts.limit}`.execute(db);
  const out: ProbeOutcome = { probed: [], expired: [] };
  for (const r of rows.rows) {
    const expired = Number(r.expired) === 1;
    const error = `dependency ${r.dependency_key} not met before the wait expired`;
    const won = await applyTransition(db, t, {
      place: { id: r.id, queue: r.queue, lane: r.lane, laneSeq: r.lane_seq === null ? null : Number(r.lane_seq) },
      guard: expired
        ? sql`state = 'blocked' AND block_expires_at <= NOW(6)`
        : sql`state = 'blocked' AND probe_after <= NOW(6)`,
      set: expired
        ? sql`state = 'dead', failure_class = 'dependency_expired', last_error = ${error}, probe_after = NULL,
            terminal_at = NOW(6)`
        : sql`state = 'pending', run_after = NOW(6), probe_after = NULL`,
      terminal: expired,
      wasHead: true,
      history: null,
    });
    if (!won) continue;
    if (expired) out.expired.push(r.id);
    else out.probed.push({ id: r.id, queue: r.queue, lane: r.lane });
  }
  return out;
}
