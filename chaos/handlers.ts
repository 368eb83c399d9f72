/**
 * The handler module the chaos run's workers load (`handlers` in their
 * config). Every effect goes through ctx.transaction and is counted with an
 * upsert, so a second commit of one item shows as n = 2 instead of being
 * hidden by a unique key.
 */
import { sql, type Transaction } from 'kysely';
import { createPool, type Pool } from 'mysql2/promise';
import { PermanentError, type Job, type JobContext } from '../src/index.js';
import {
  CHAOS_QUEUE,
  CHAOS_TYPE,
  DELIBERATE_PERMANENT,
  DELIBERATE_TRANSIENT,
  EFFECTS_TABLE,
  wallUs,
  type ChaosPayload,
} from './items.js';

type EffectsDb = Record<string, never>;

const worker = process.env.CHAOS_WORKER ?? `pid${process.pid}`;
const table = sql.table(EFFECTS_TABLE);

/**
 * `npm run chaos -- --sabotage effect-outside-tx`, to see the checks fire:
 * the effect is written on a connection of its own, outside ctx.transaction,
 * so a retried or reclaimed item writes it again.
 */
const sabotage = process.env.CHAOS_SABOTAGE === 'effect-outside-tx';
let ownPool: Pool | undefined;
async function recordEffectOutsideTransaction(job: Job<ChaosPayload>, startedUs: number): Promise<void> {
  ownPool ??= createPool({ uri: process.env.CHAOS_DATABASE_URL ?? '', connectionLimit: 2 });
  await ownPool.query(
    `INSERT INTO ${EFFECTS_TABLE} (item_id, n, k, lane, lane_seq, worker, pid, attempt, started_us, upsert_at)
     VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))
     ON DUPLICATE KEY UPDATE n = n + 1, dup_worker = VALUES(worker), dup_attempt = VALUES(attempt),
       dup_at = UTC_TIMESTAMP(6)`,
    [job.id, job.payload.k, job.lane, job.laneSeq, worker, process.pid, job.attempt, startedUs],
  );
}

/** Waits `ms`, or throws the abort reason as soon as the item's signal aborts. */
function work(ms: number, signal: AbortSignal): Promise<void> {
  signal.throwIfAborted();
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

async function recordEffect(trx: Transaction<EffectsDb>, job: Job<ChaosPayload>, startedUs: number): Promise<void> {
  await sql`INSERT INTO ${table} (item_id, n, k, lane, lane_seq, worker, pid, attempt, started_us, upsert_at)
    VALUES (${job.id}, 1, ${job.payload.k}, ${job.lane}, ${job.laneSeq}, ${worker}, ${process.pid}, ${job.attempt},
    ${startedUs}, NOW(6))
    ON DUPLICATE KEY UPDATE n = n + 1, dup_worker = VALUES(worker), dup_attempt = VALUES(attempt),
      dup_at = NOW(6)`.execute(trx);
}

async function step(job: Job<ChaosPayload>, ctx: JobContext<EffectsDb>): Promise<void> {
  const startedUs = wallUs();
  const { kind, workMs } = job.payload;
  await work(workMs, ctx.signal);
  if (kind === 'permanent') throw new PermanentError(DELIBERATE_PERMANENT);
  if (kind === 'fail-once' && job.attempt === 1) throw new Error(DELIBERATE_TRANSIENT);
  if (sabotage) await recordEffectOutsideTransaction(job, startedUs);
  await ctx.transaction(async (trx) => {
    if (!sabotage) await recordEffect(trx, job, startedUs);
    // The effect above must roll back with this attempt.
    if (kind === 'fail-in-tx-once' && job.attempt === 1) throw new Error(DELIBERATE_TRANSIENT);
  });
}

export const handlers = { [CHAOS_QUEUE]: { [CHAOS_TYPE]: step } };
