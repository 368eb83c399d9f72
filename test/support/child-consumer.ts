/**
 * A consumer in a process of its own, for the fleet and fault suites:
 *
 *   node --import tsx test/support/child-consumer.ts
 *
 * Configured through the environment:
 *   LW_DB_URL       mysql://… naming the test database (required)
 *   LW_REDIS_URL    redis://… (required)
 *   LW_KEY_PREFIX   the test's Redis key prefix (required)
 *   LW_QUEUE        queue to consume (required)
 *   LW_NAME         consumer name = lease owner = effect rows' worker (required)
 *   LW_CONCURRENCY  executor slots (default 8)
 *   LW_LEASE_MS     lease (default 30000)
 *   LW_POLL_MS      backstop sweep interval (default 1000)
 *   LW_MODE         'effects' (default): short work, then an effect row through
 *                   ctx.transaction; 'hang': wait for the abort signal forever;
 *                   'steps-hang': three durable steps (support/step-effects.ts), the third never ends;
 *                   'outbox': type `parent`, an effect row and follow-up items of
 *                   LW_FOLLOW_QUEUE in ctx.transaction (support/outbox-handler.ts)
 *   LW_FOLLOW_QUEUE 'outbox': the follow-up items' queue (required there)
 *   LW_OUTBOX_STOP  'outbox': where the first attempt halts, writing {"event":"at",…} (default: nowhere)
 *   LW_WORK_MS      'effects': fixed work time per item (default: random 0–LW_MAX_WORK_MS)
 *   LW_MAX_WORK_MS  'effects': upper bound of the random work time (default 2)
 *   LW_DRAIN_MS     drain timeout on SIGTERM (default 10000)
 *
 * Writes one JSON line per event to stdout: {"event":"ready"} once consuming,
 * {"event":"stopped","counters":{…}} after a SIGTERM/SIGINT stop, then exits 0.
 * Handles the type `step`.
 */
import { Consumer } from '../../src/consumer/consumer.js';
import type { HandlerEntry } from '../../src/consumer/types.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { WakeChannel } from '../../src/wake/wake-channel.js';
import { effectHandler, hangHandler, type EffectsDB } from './effects.js';
import { testTxnMode } from './ledger.js';
import { threeStepHandler } from './step-effects.js';
import { haltFollowUpWakes, OUTBOX_STOPS, outboxHandler, type OutboxStop } from './outbox-handler.js';

function required(name: string): string {
  const v = process.env[name];
  if (v === undefined || v === '') throw new Error(`child-consumer: ${name} is required`);
  return v;
}

function int(name: string, fallback: number): number {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`child-consumer: ${name} must be a number, got ${v}`);
  return n;
}

function emit(event: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

async function main(): Promise<void> {
  const name = required('LW_NAME');
  const mode = process.env.LW_MODE ?? 'effects';
  if (mode !== 'effects' && mode !== 'hang' && mode !== 'steps-hang' && mode !== 'outbox')
    throw new Error(`child-consumer: unknown LW_MODE ${mode}`);
  // The test's TiDB transaction mode (LANEWAKE_TEST_TIDB_TXN_MODE) reaches the child through its environment.
  const ledger = new Ledger({ url: required('LW_DB_URL'), poolSize: 8, ...testTxnMode() });
  const wake = new WakeChannel({ redis: required('LW_REDIS_URL'), keyPrefix: required('LW_KEY_PREFIX') });
  const fixed = process.env.LW_WORK_MS;
  const step =
    mode === 'hang'
      ? hangHandler()
      : mode === 'steps-hang'
        ? threeStepHandler<EffectsDB>(ledger.db, name, { hangAtThree: true })
        : effectHandler(
            name,
            fixed !== undefined && fixed !== ''
              ? { fixedWorkMs: int('LW_WORK_MS', 0) }
              : { maxWorkMs: int('LW_MAX_WORK_MS', 2) },
          );
  const stopAt = process.env.LW_OUTBOX_STOP;
  if (stopAt !== undefined && stopAt !== '' && !(OUTBOX_STOPS as readonly string[]).includes(stopAt))
    throw new Error(`child-consumer: unknown LW_OUTBOX_STOP ${stopAt}`);
  const stop = stopAt === undefined || stopAt === '' ? undefined : (stopAt as OutboxStop);
  const outbox: Record<string, HandlerEntry<EffectsDB>> = mode === 'outbox'
    ? { parent: outboxHandler(name, required('LW_FOLLOW_QUEUE'), stop, emit) }
    : {};
  if (mode === 'outbox' && stop === 'after-commit') haltFollowUpWakes(wake, required('LW_FOLLOW_QUEUE'), emit);
  const consumer = new Consumer<EffectsDB>({
    ledger,
    wake,
    queue: required('LW_QUEUE'),
    name,
    concurrency: int('LW_CONCURRENCY', 8),
    leaseMs: int('LW_LEASE_MS', 30_000),
    pollIntervalMs: int('LW_POLL_MS', 1000),
    handlers: { step, ...outbox },
  });

  let stopping = false;
  const shutdown = async (): Promise<void> => {
    if (stopping) {
      // A second signal forces the exit.
      process.exit(1);
    }
    stopping = true;
    await consumer.stop({ drainTimeoutMs: int('LW_DRAIN_MS', 10_000) });
    await wake.close();
    await ledger.close();
    emit({ event: 'stopped', counters: consumer.counters });
    process.exit(0);
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
      shutdown().catch((error: unknown) => {
        process.stderr.write(`child-consumer: stop failed: ${String((error as Error).stack ?? error)}\n`);
        process.exit(1);
      });
    });
  }

  await consumer.start();
  emit({ event: 'ready', name, pid: process.pid });
}

main().catch((error: unknown) => {
  process.stderr.write(`child-consumer: ${String((error as Error).stack ?? error)}\n`);
  process.exit(1);
});
