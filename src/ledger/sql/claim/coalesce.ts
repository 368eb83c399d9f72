import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import { isConnectionError, readAfterLostConnection, retryOnConflict } from '../../retry.js';
import { parseJson } from '../../rows.js';
import type { LedgerTables } from '../../tables.js';
import type { ClaimedItem, CoalesceMode } from '../../types.js';
import { affected, list, NO_TIME } from '../common/fragments.js';

/** Which types coalesce, and how much one group may take (docs/design/batches-and-steps.md, Coalescing). */
export interface CoalesceSpec {
  /** Per type: how its handler sees the group, and how many members one group takes at most besides the head. */
  types: Readonly<Record<string, { mode: CoalesceMode; max: number }>>;
  /** Payload bytes one group takes at most, the head's included. */
  maxBytes: number;
}

interface FollowerRow {
  id: string;
  type: string;
  lane_seq: number | string;
  state: string;
  due: number | string;
  bytes: number | string;
}

interface MemberRow {
  id: string;
  lane_seq: number | string;
  payload: string;
}

const TERMINAL = new Set(['completed', 'dead', 'skipped', 'cancelled']);

/**
 * Gives each claimed lane head of a coalescing type its group: the later
 * pending items of its lane and type that are due, in lane order, up to the
 * first item of another type, one not due yet, the caps, or one enqueued
 * after the head was claimed (its started_at). They are claimed under the
 * head's lease with its attempt count (a CAS on pending non-heads, so an
 * item cancelled meanwhile is left out), and read back in lane order.
 * Heads of other types, and heads with nothing to join, come back as they were.
 */
export async function joinGroups(
  exec: Executor,
  t: LedgerTables,
  heads: readonly ClaimedItem[],
  spec: CoalesceSpec,
  opts: { budget?: number; inTransaction?: boolean } = {},
): Promise<ClaimedItem[]> {
  const out: ClaimedItem[] = [];
  let budget = opts.budget ?? Number.POSITIVE_INFINITY;
  for (const head of heads) {
    const coalesce = spec.types[head.type];
    if (coalesce === undefined || head.lane === null || head.laneSeq === null) {
      out.push(head);
      continue;
    }
    if (budget <= 0) {
      out.push(await loneHead(exec, t, head, coalesce.mode));
      continue;
    }
    const joined = await joinGroup(
      exec,
      t,
      head,
      { mode: coalesce.mode, max: Math.min(coalesce.max, budget) },
      spec.maxBytes,
      opts.inTransaction === true,
    );
    budget -= joined.group?.ids.length ?? 0;
    out.push(joined);
  }
  return out;
}

async function joinGroup(
  exec: Executor,
  t: LedgerTables,
  head: ClaimedItem,
  { mode, max }: { mode: CoalesceMode; max: number },
  maxBytes: number,
  inTransaction: boolean,
): Promise<ClaimedItem> {
  const lane = head.lane as string;
  const followers =
    await sql<FollowerRow>`SELECT id, type, lane_seq, state, run_after <= NOW(6) AS due, LENGTH(payload) AS bytes
    FROM ${t.items} FORCE INDEX (ix_lane)
    WHERE queue = ${head.queue} AND lane = ${lane} AND lane_seq > ${head.laneSeq} AND created_at <= ${
      head.startedAt ?? head.leaseUntil
    }
    ORDER BY lane_seq LIMIT ${max + 1}`.execute(exec);
  const chosen: string[] = [];
  let bytes = Buffer.byteLength(JSON.stringify(head.payload) ?? '', 'utf8');
  for (const row of followers.rows) {
    // Items behind a head are pending or ended (an operator may cancel one): ended ones are passed over.
    if (TERMINAL.has(row.state)) continue;
    if (row.state !== 'pending' || row.type !== head.type || Number(row.due) !== 1) break;
    bytes += Number(row.bytes);
    if (chosen.length >= max || bytes > maxBytes) break;
    chosen.push(row.id);
  }
  if (chosen.length === 0) return loneHead(exec, t, head, mode);
  // The members' lease is the head's own expiry, copied from its row: a group expires whole, so a
  // reclaim never takes the head back while its members stay held (or the other way round).
  const claimMembers = sql`UPDATE ${t.items} m JOIN ${t.items} h ON h.id = ${head.id} AND h.lease_token = ${
    head.leaseToken
  }
    SET m.state = 'processing', m.lease_token = h.lease_token, m.lease_owner = h.lease_owner,
      m.lease_until = h.lease_until,
      m.attempt = h.attempt, m.epoch = h.epoch, m.cancel_requested = 0, m.started_at = h.started_at,
        m.group_head = h.id, m.updated_at = NOW(6)
    WHERE m.id IN (${list(chosen)}) AND m.queue = ${head.queue} AND m.state = 'pending' AND m.is_head = 0`;
  const readMembers = sql<MemberRow>`SELECT id, lane_seq, payload FROM ${t.items}
    WHERE id IN (${list(chosen)}) AND lease_token = ${head.leaseToken} AND state = 'processing' ORDER BY lane_seq`;
  let rows: MemberRow[];
  try {
    // A victim of a deadlock or write conflict wrote nothing: run it again (in a transaction, its
    // owner runs the whole transaction again: the server rolled it all back).
    const claimedMembers = inTransaction
      ? await claimMembers.execute(exec)
      : await retryOnConflict(() => claimMembers.execute(exec));
    if (affected(claimedMembers) === 0) return loneHead(exec, t, head, mode);
    rows = (await readMembers.execute(exec)).rows;
  } catch (error) {
    if (inTransaction || !isConnectionError(error)) throw error;
    // Members held under the head's token must be known to its holder (they end with it), so what
    // the claim won is read back on a fresh connection; the locking read waits for an UPDATE still running.
    rows = await readAfterLostConnection(
      async () => (await sql<MemberRow>`${readMembers} FOR UPDATE`.execute(exec)).rows,
      error,
    );
  }
  const last = rows[rows.length - 1];
  if (last === undefined) return loneHead(exec, t, head, mode);
  const payloads = rows.map((r) => parseJson(r.payload));
  const group = {
    ids: rows.map((r) => r.id),
    lastSeq: Number(last.lane_seq),
    newest: payloads[payloads.length - 1],
    ...(mode === 'latest'
      ? {}
      : { payloads: [...(mode === 'settled' ? await unsettled(exec, t, head) : []), head.payload, ...payloads] }),
  };
  return { ...head, group };
}

/**
 * A head that runs as a group of one: a `settled` one still gets its lane's
 * unsettled payloads (its handler rebuilds from the last settled state too).
 */
async function loneHead(exec: Executor, t: LedgerTables, head: ClaimedItem, mode: CoalesceMode): Promise<ClaimedItem> {
  if (mode !== 'settled') return head;
  return { ...head, unsettled: await unsettled(exec, t, head) };
}

/**
 * `settled`: the payloads of the lane's items of the head's type that ended
 * without completing (dead, skipped, cancelled) since its last completed
 * one, in lane order: a projection rebuilt from the last settled state
 * needs them too.
 */
async function unsettled(exec: Executor, t: LedgerTables, head: ClaimedItem): Promise<unknown[]> {
  const rows = await sql<{ payload: string }>`SELECT payload FROM ${t.items} FORCE INDEX (ix_lane)
    WHERE queue = ${head.queue} AND lane = ${head.lane} AND lane_seq < ${head.laneSeq} AND type = ${head.type}
      AND state IN ('dead', 'skipped', 'cancelled') AND terminal_at > ${NO_TIME}
      AND lane_seq > COALESCE((SELECT MAX(c.lane_seq) FROM (SELECT lane_seq FROM ${t.items} FORCE INDEX (ix_lane)
        WHERE queue = ${head.queue} AND lane = ${head.lane} AND lane_seq < ${head.laneSeq} AND type = ${
          head.type
        } AND state = 'completed') c), 0)
    ORDER BY lane_seq`.execute(exec);
  return rows.rows.map((r) => parseJson(r.payload));
}
