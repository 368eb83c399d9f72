/**
 * The demo workload's handlers (queue `demo`). Every handler that succeeds
 * writes its effect row through ctx.transaction, so the row and the item's
 * completion commit together: the demo then proves exactly-once effects and
 * per-lane order from the rows.
 */
import { sql, type Transaction } from 'kysely';
import { PermanentError } from '../consumer/errors.js';
import { defineHandler, type JobContext } from '../consumer/types.js';

export const DEMO_QUEUE = 'demo';
export const DEMO_DEADLINE_MS = 400;

interface DemoPayload {
  n: number;
}

const replica = process.env.LANEWAKE_DEMO_REPLICA ?? String(process.pid);

function nowUs(): bigint {
  return process.hrtime.bigint() / 1000n;
}

async function writeEffect(
  job: { id: string; lane: string | null; laneSeq: number | null },
  ctx: JobContext,
  startedUs: bigint,
): Promise<unknown> {
  return ctx.transaction(async (trx: Transaction<Record<string, never>>) => {
    await sql`INSERT INTO demo_effects (item_id, lane, lane_seq, replica, started_us, ended_us)
      VALUES (${job.id}, ${job.lane}, ${job.laneSeq}, ${replica}, ${startedUs.toString()},
      ${nowUs().toString()})`.execute(trx);
    return { replica };
  });
}

const work = async (ms: number, signal: AbortSignal): Promise<void> => {
  if (ms <= 0) return;
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
    });
  });
};

export const handlers = {
  [DEMO_QUEUE]: {
    /** Ordinary work: a millisecond or two. */
    work: async (
      job: { id: string; lane: string | null; laneSeq: number | null; payload: DemoPayload },
      ctx: JobContext,
    ) => {
      const started = nowUs();
      await work(job.payload.n % 3, ctx.signal);
      return writeEffect(job, ctx, started);
    },
    /** Fails its first attempt: retried with backoff. */
    flaky: async (
      job: { id: string; lane: string | null; laneSeq: number | null; attempt: number },
      ctx: JobContext,
    ) => {
      const started = nowUs();
      if (job.attempt === 1) throw new Error('upstream timed out (demo: first attempt always fails)');
      return writeEffect(job, ctx, started);
    },
    /** Can never succeed: dead letter at once. */
    doomed: async () => {
      throw new PermanentError('the invoice template is missing (demo: always fails permanently)');
    },
    /** Slower than its deadline on the first attempt: aborted and released without spending an attempt. */
    slow: defineHandler({
      deadlineMs: DEMO_DEADLINE_MS,
      handle: async (
        job: { id: string; lane: string | null; laneSeq: number | null; attempt: number; checkpoint: unknown },
        ctx,
      ) => {
        const started = nowUs();
        if (job.checkpoint === null) {
          await ctx.checkpoint({ tried: true });
          await work(DEMO_DEADLINE_MS * 5, ctx.signal);
        }
        return writeEffect(job, ctx, started);
      },
    }),
  },
};
