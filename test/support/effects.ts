import { sql, type Transaction } from 'kysely';
import type { Ledger } from '../../src/ledger/ledger.js';
import type { Job, JobContext } from '../../src/consumer/types.js';

/**
 * The `effects` table: one row per handler run that committed through
 * `ctx.transaction`. `item_id` is the primary key, so a second committed run
 * of one item cannot add a second row (it would fail instead). Times are
 * microseconds of the system-wide monotonic clock (`process.hrtime`), which
 * every process on this machine shares, so runs in different processes can
 * be ordered against each other.
 */
export interface EffectsTable {
  item_id: string;
  lane: string | null;
  lane_seq: number | null;
  enq_index: number | null;
  worker: string;
  started_at_us: number;
  ended_at_us: number;
}

export interface EffectsDB {
  effects: EffectsTable;
}

export interface StepPayload {
  /** Position of the item in its lane, in enqueue order (0-based). */
  n: number;
}

export interface EffectRow {
  itemId: string;
  lane: string | null;
  laneSeq: number | null;
  enqIndex: number | null;
  worker: string;
  startedAtUs: number;
  endedAtUs: number;
}

/** Microseconds on CLOCK_MONOTONIC: comparable across processes of one host. */
export function nowUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

export async function createEffectsTable(ledger: Ledger): Promise<void> {
  await sql`CREATE TABLE effects (
    item_id VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    lane VARCHAR(255) NULL,
    lane_seq BIGINT NULL,
    enq_index INT NULL,
    worker VARCHAR(128) NOT NULL,
    started_at_us BIGINT NOT NULL,
    ended_at_us BIGINT NOT NULL,
    PRIMARY KEY (item_id)
  ) ENGINE=InnoDB`.execute(ledger.db);
}

export async function readEffects(ledger: Ledger): Promise<EffectRow[]> {
  const r = await sql<{
    item_id: string;
    lane: string | null;
    lane_seq: number | string | null;
    enq_index: number | null;
    worker: string;
    started_at_us: number | string;
    ended_at_us: number | string;
  }>`SELECT item_id, lane, lane_seq, enq_index, worker, started_at_us, ended_at_us FROM effects`.execute(ledger.db);
  return r.rows.map((x) => ({
    itemId: x.item_id,
    lane: x.lane,
    laneSeq: x.lane_seq === null ? null : Number(x.lane_seq),
    enqIndex: x.enq_index === null ? null : Number(x.enq_index),
    worker: x.worker,
    startedAtUs: Number(x.started_at_us),
    endedAtUs: Number(x.ended_at_us),
  }));
}

export async function effectCount(ledger: Ledger): Promise<number> {
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM effects`.execute(ledger.db);
  return Number(r.rows[0]?.n ?? -1);
}

/** Writes the effect row of `job` inside `trx` (the handler's ledger transaction). */
export async function insertEffect(
  trx: Transaction<EffectsDB>,
  job: Job<StepPayload>,
  worker: string,
  startedAtUs: number,
): Promise<void> {
  await trx
    .insertInto('effects')
    .values({
      item_id: job.id,
      lane: job.lane,
      lane_seq: job.laneSeq,
      enq_index: typeof job.payload?.n === 'number' ? job.payload.n : null,
      worker,
      started_at_us: startedAtUs,
      ended_at_us: nowUs(),
    })
    .execute();
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The fleet's handler: a short piece of "work" (a random 0–`maxWorkMs` ms
 * await, or exactly `fixedWorkMs`), then the effect row, committed together
 * with the item's completion through `ctx.transaction`.
 */
export function effectHandler(worker: string, work: { maxWorkMs?: number; fixedWorkMs?: number } = {}) {
  return async (job: Job<StepPayload>, ctx: JobContext<EffectsDB>): Promise<void> => {
    const startedAtUs = nowUs();
    const ms = work.fixedWorkMs ?? Math.random() * (work.maxWorkMs ?? 2);
    await sleep(ms);
    await ctx.transaction((trx) => insertEffect(trx, job, worker, startedAtUs));
  };
}

/** A handler that never finishes on its own: it waits for its signal, then throws the abort reason. */
export function hangHandler() {
  return (_job: Job<StepPayload>, ctx: JobContext<EffectsDB>): Promise<void> =>
    new Promise<void>((_resolve, reject) => {
      if (ctx.signal.aborted) reject(ctx.signal.reason);
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
    });
}
