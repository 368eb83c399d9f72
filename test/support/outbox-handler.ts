import { sql } from 'kysely';
import type { Job, JobContext } from '../../src/consumer/types.js';
import type { WakeChannel } from '../../src/wake/wake-channel.js';
import { nowUs, type EffectsDB } from './effects.js';

/**
 * Where the outbox handler of the kill tests (test/shape-outbox.test.ts)
 * stops on its first attempt, for the test to SIGKILL its process there:
 * inside ctx.transaction after its own write and before ctx.enqueue, after
 * ctx.enqueue before the COMMIT, or after the COMMIT before the follow-ups'
 * wake-up is published.
 */
export const OUTBOX_STOPS = ['before-enqueue', 'after-enqueue', 'after-commit'] as const;
export type OutboxStop = (typeof OUTBOX_STOPS)[number];

/** How many follow-up items one parent enqueues. */
export const FOLLOW_UPS = 2;

/** Tells the test it reached `point`, then never settles: the process is killed there. */
async function halt(point: OutboxStop, id: string, say: (event: Record<string, unknown>) => void): Promise<never> {
  say({ event: 'at', point, id });
  return new Promise<never>(() => undefined);
}

/**
 * A parent handler: one effect row and FOLLOW_UPS follow-up items of
 * `followQueue`, all in its ctx.transaction (the transactional outbox). On
 * its first attempt it halts at `stop`, if given.
 */
export function outboxHandler(
  worker: string,
  followQueue: string,
  stop: OutboxStop | undefined,
  say: (event: Record<string, unknown>) => void,
): (job: Job, ctx: JobContext<EffectsDB>) => Promise<unknown> {
  return async (job, ctx) => {
    const startedAt = nowUs();
    return ctx.transaction(async (trx) => {
      await sql`INSERT INTO effects (item_id, lane, lane_seq, enq_index, worker, started_at_us, ended_at_us)
        VALUES (${job.id}, NULL, NULL, NULL, ${worker}, ${startedAt}, ${nowUs()})`.execute(trx);
      if (stop === 'before-enqueue' && job.attempt === 1) await halt(stop, job.id, say);
      const made = await ctx.enqueueMany(
        Array.from({ length: FOLLOW_UPS }, (_, n) => ({
          queue: followQueue,
          type: 'follow',
          payload: { parent: job.id, n },
        })),
      );
      if (stop === 'after-enqueue' && job.attempt === 1) await halt(stop, job.id, say);
      return { followUps: made.map((m) => m.id) };
    });
  };
}

/**
 * A wake channel whose publish of `followQueue`'s wake-ups halts (the after-commit stop): the process
 * dies before announcing them.
 */
export function haltFollowUpWakes(
  wake: WakeChannel,
  followQueue: string,
  say: (event: Record<string, unknown>) => void,
): void {
  const publish = wake.publish.bind(wake);
  wake.publish = async (messages) => {
    const follow = messages.find((m) => m.queue === followQueue);
    if (follow !== undefined) await halt('after-commit', follow.ids[0] ?? '', say);
    return publish(messages);
  };
}
