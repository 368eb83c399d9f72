/**
 * The ledger's SQL floor (bench/floor.ts): each table layout it measures,
 * the ALTER that makes it from the current schema, and the processing path's
 * statements for it drained on raw connections with nothing around them.
 *
 * The statements are the engine's (src/ledger/sql/claim.ts and
 * complete-batch.ts) written out for each layout: a candidate read of twice
 * the batch, the CAS UPDATE and its read-back in one round trip, and one
 * completion UPDATE per claimed batch.
 */
import { randomBytes } from 'node:crypto';
import mysql, { type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';
import { CLAIMED_COLUMN_LIST, NO_TIME_TEXT as NO_TIME } from '../src/ledger/internal.js';
import { cpuSample, isInterrupted, type CpuSample } from './support.js';

export const QUEUE = 'bench';
/** A drain that completes nothing for this long fails the run instead of hanging it. */
export const STALL_MS = 60_000;

export const LAYOUTS = ['current', 'schema-1', 'claim-flag'] as const;
export type Layout = (typeof LAYOUTS)[number];

const ASCII = 'CHARACTER SET ascii COLLATE ascii_bin';

export async function applyLayout(c: mysql.Connection, layout: Layout): Promise<void> {
  if (layout === 'current') return;
  if (layout === 'claim-flag') {
    await c.query(
      'ALTER TABLE lw_items DROP INDEX ix_claim, ADD INDEX ix_claim (queue, queue_class, is_head, priority, run_after)',
    );
  } else if (layout === 'schema-1') {
    // Schema 1's column definitions and indexes, then its NULLs for "none".
    await c.query(`ALTER TABLE lw_items MODIFY state VARCHAR(16) ${ASCII} NOT NULL, MODIFY lease_token VARCHAR(32) ${ASCII} NULL,
      MODIFY lease_owner VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, MODIFY lease_until DATETIME(6) NULL,
      MODIFY started_at DATETIME(6) NULL, MODIFY terminal_at DATETIME(6) NULL, ADD INDEX ix_terminal (terminal_at), DROP INDEX ix_created`);
    await c.query(`UPDATE lw_items SET lease_token = NULLIF(lease_token, ''), lease_owner = NULLIF(lease_owner, ''),
      lease_until = NULLIF(lease_until, ${NO_TIME}), started_at = NULLIF(started_at, ${NO_TIME}), terminal_at = NULLIF(terminal_at, ${NO_TIME})`);
  }
}

function drainStatements(layout: Layout) {
  const flag = layout === 'claim-flag';
  const claimable = flag ? 'is_head = 1' : "state = 'pending' AND is_head = 1";
  const noLease = layout === 'schema-1' ? 'NULL' : NO_TIME;
  return {
    candidates: (
      batch: number,
    ) => `SELECT id FROM lw_items WHERE queue = '${QUEUE}' AND queue_class = 'default' AND ${claimable}
      AND run_after <= NOW(6) ORDER BY priority, run_after LIMIT ${batch * 2}`,
    claim: (
      ids: string,
      token: string,
    ) => `UPDATE lw_items SET ${flag ? 'is_head = 0, ' : ''}state = 'processing', lease_token = '${token}',
      lease_owner = 'floor', lease_until = NOW(6) + INTERVAL 30 SECOND, attempt = attempt + 1, epoch = NULL, cancel_requested = 0,
      started_at = NOW(6), updated_at = NOW(6)
      WHERE id IN (${ids}) AND queue = '${QUEUE}' AND ${claimable} AND run_after <= NOW(6);
      SELECT ${CLAIMED_COLUMN_LIST} FROM lw_items WHERE id IN (${ids}) AND lease_token = '${token}' AND state = 'processing'`,
    complete: (
      ids: string,
      token: string,
    ) => `UPDATE lw_items SET state = 'completed', result = NULL, lease_until = ${noLease},
      terminal_at = NOW(6), updated_at = NOW(6) WHERE id IN (${ids}) AND lease_token = '${token}' AND state = 'processing'`,
  };
}

/** Picks `n` of the candidates at random, as the engine's claim does, so concurrent claimers collide as they would. */
function pick<T>(rows: readonly T[], n: number): T[] {
  const a = [...rows];
  for (let i = 0; i < Math.min(n, a.length); i++) {
    const j = i + Math.floor(Math.random() * (a.length - i));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a.slice(0, n);
}

export interface FloorDrainOptions {
  items: number;
  batch: number;
  connections: number;
}

/**
 * Drains the queue's `items` items with the layout's statements on
 * `connections` connections at once, counting each completion in
 * `completedIds`. Returns the CPU sample taken when the completion UPDATEs
 * have reported `items` rows completed: the end of the floor's clock.
 */
export async function drainFloor(
  url: string,
  layout: Layout,
  opts: FloorDrainOptions,
  completedIds: Map<string, number>,
): Promise<CpuSample> {
  const s = drainStatements(layout);
  const conns = await Promise.all(
    Array.from({ length: opts.connections }, () => mysql.createConnection({ uri: url, multipleStatements: true })),
  );
  let lastProgress = Date.now();
  let completedRows = 0;
  let end: CpuSample | undefined;
  try {
    // Each completion UPDATE is then its own transaction: once its result is
    // back it has committed, so the rows it reports are completed in the ledger.
    await Promise.all(conns.map((c) => c.query('SET autocommit = 1')));
    await Promise.all(
      conns.map(async (c) => {
        for (;;) {
          if (completedRows >= opts.items) return;
          if (isInterrupted()) throw new Error('interrupted');
          if (Date.now() - lastProgress > STALL_MS) throw new Error(`no completion for ${STALL_MS} ms`);
          const [candidates] = await c.query<RowDataPacket[]>(s.candidates(opts.batch));
          if (candidates.length === 0) return;
          const chosen = pick(candidates, opts.batch).map((r) => `'${String(r.id)}'`);
          const token = randomBytes(16).toString('base64url');
          const [claimed] = (await c.query(s.claim(chosen.join(','), token))) as unknown as [
            [ResultSetHeader, RowDataPacket[]],
          ];
          const won = claimed[1].map((r) => String(r.id));
          if (won.length === 0) continue;
          const [done] = await c.query<ResultSetHeader>(s.complete(won.map((id) => `'${id}'`).join(','), token));
          if (done.affectedRows !== won.length)
            throw new Error(`completed ${done.affectedRows} of ${won.length} claimed items`);
          completedRows += done.affectedRows;
          if (completedRows >= opts.items) end ??= cpuSample();
          for (const id of won) completedIds.set(id, (completedIds.get(id) ?? 0) + 1);
          lastProgress = Date.now();
        }
      }),
    );
  } finally {
    await Promise.all(conns.map((c) => c.end().catch(() => undefined)));
  }
  if (end === undefined)
    throw new Error(`${layout}: the queue ran dry with ${completedRows} of ${opts.items} items completed`);
  // Untimed, once the draining sessions are closed: a session of its own sees every completion, so each had committed.
  const check = await mysql.createConnection({ uri: url });
  try {
    const [counted] = await check.query<RowDataPacket[]>(
      `SELECT COUNT(*) AS n FROM lw_items WHERE queue = '${QUEUE}' AND state = 'completed'`,
    );
    const inLedger = Number(counted[0]?.n ?? 0);
    if (inLedger !== opts.items)
      throw new Error(`${layout}: the ledger counts ${inLedger} of ${opts.items} items completed`);
  } finally {
    await check.end();
  }
  return end;
}
