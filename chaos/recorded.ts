/**
 * What the checks read from the run's database once it is over: the items,
 * their attempt history, the handlers' effects and the lane rows, every time
 * in µs (the ledger's NOW(6)).
 */
import type { RowDataPacket } from 'mysql2/promise';
import type { ChaosDatabase } from './database.js';
import { CHAOS_QUEUE, EFFECTS_TABLE, type ChaosKind } from './items.js';

export interface ItemRow {
  id: string;
  k: number;
  kind: ChaosKind;
  lane: string | null;
  laneSeq: number | null;
  state: string;
  attempt: number;
  maxAttempts: number;
  failureClass: string | null;
  lastError: string | null;
  createdUs: number;
  startedUs: number | null;
  terminalUs: number | null;
}

export interface AttemptRow {
  itemId: string;
  attempt: number;
  outcome: string;
  failureClass: string | null;
  error: string | null;
  worker: string | null;
  startedUs: number | null;
  endedUs: number;
}

export interface EffectRow {
  itemId: string;
  n: number;
  k: number;
  lane: string | null;
  laneSeq: number | null;
  worker: string;
  attempt: number;
  startedUs: number;
  upsertUs: number;
  dupWorker: string | null;
  dupAttempt: number | null;
}

export interface LaneRow {
  lane: string;
  nextSeq: number;
  /** 0 while the lane has no unfinished item, else the sequence of the item that made it busy. */
  busyFrom: number;
}

export interface Recorded {
  items: ItemRow[];
  attempts: AttemptRow[];
  effects: EffectRow[];
  lanes: LaneRow[];
}

const us = (col: string): string => `IF(${col} < '1001-01-01', NULL, ROUND(UNIX_TIMESTAMP(${col}) * 1000000))`;
const num = (v: unknown): number => Number(v);
const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export async function readRecorded(db: ChaosDatabase): Promise<Recorded> {
  const items = await db.query<RowDataPacket>(
    `SELECT id, lane, lane_seq, state, attempt, max_attempts, failure_class, last_error, payload,
       ${us('created_at')} AS created_us, ${us('started_at')} AS started_us, ${us('terminal_at')} AS terminal_us
     FROM \`${db.name}\`.lw_items WHERE queue = ?`,
    [CHAOS_QUEUE],
  );
  const attempts = await db.query<RowDataPacket>(
    `SELECT item_id, attempt, outcome, failure_class, error, worker, ${us('started_at')} AS started_us,
      ${us('ended_at')} AS ended_us
     FROM \`${db.name}\`.lw_attempts`,
  );
  const effects = await db.query<RowDataPacket>(
    `SELECT item_id, n, k, lane, lane_seq, worker, attempt, started_us, ${us('upsert_at')} AS upsert_us,
      dup_worker, dup_attempt
     FROM \`${db.name}\`.${EFFECTS_TABLE}`,
  );
  const lanes = await db.query<RowDataPacket>(
    `SELECT lane, next_seq, busy_from FROM \`${db.name}\`.lw_lanes WHERE queue = ?`,
    [CHAOS_QUEUE],
  );
  return {
    lanes: lanes.map((r) => ({ lane: String(r.lane), nextSeq: num(r.next_seq), busyFrom: num(r.busy_from) })),
    items: items.map((r) => {
      const payload = JSON.parse(String(r.payload)) as { k: number; kind: ChaosKind };
      return {
        id: String(r.id),
        k: payload.k,
        kind: payload.kind,
        lane: r.lane === null ? null : String(r.lane),
        laneSeq: numOrNull(r.lane_seq),
        state: String(r.state).trim(),
        attempt: num(r.attempt),
        maxAttempts: num(r.max_attempts),
        failureClass: r.failure_class === null ? null : String(r.failure_class),
        lastError: r.last_error === null ? null : String(r.last_error),
        createdUs: num(r.created_us),
        startedUs: numOrNull(r.started_us),
        terminalUs: numOrNull(r.terminal_us),
      };
    }),
    attempts: attempts.map((r) => ({
      itemId: String(r.item_id),
      attempt: num(r.attempt),
      outcome: String(r.outcome),
      failureClass: r.failure_class === null ? null : String(r.failure_class),
      error: r.error === null ? null : String(r.error),
      worker: r.worker === null ? null : String(r.worker),
      startedUs: numOrNull(r.started_us),
      endedUs: num(r.ended_us),
    })),
    effects: effects.map((r) => ({
      itemId: String(r.item_id),
      n: num(r.n),
      k: num(r.k),
      lane: r.lane === null ? null : String(r.lane),
      laneSeq: numOrNull(r.lane_seq),
      worker: String(r.worker),
      attempt: num(r.attempt),
      startedUs: num(r.started_us),
      upsertUs: num(r.upsert_us),
      dupWorker: r.dup_worker === null ? null : String(r.dup_worker),
      dupAttempt: numOrNull(r.dup_attempt),
    })),
  };
}
