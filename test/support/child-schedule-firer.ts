/**
 * A schedule firer in a process of its own (src/schedules/firer.ts), for the
 * schedule suites' replicas:
 *
 *   node --import tsx test/support/child-schedule-firer.ts
 *
 * Configured through the environment:
 *   LW_DB_URL           mysql://… naming the test database (required)
 *   LW_REDIS_URL        redis://… for wake-ups (optional)
 *   LW_KEY_PREFIX       the test's Redis key prefix (with LW_REDIS_URL)
 *   LW_CHECK_MS         the firer's longest wait between looks (default 1000)
 *   LW_CLOCK_OFFSET_MS  this replica's clock off by this much (default 0)
 *
 * Writes {"event":"ready"} once firing, and after a SIGTERM stop
 * {"event":"stopped","counters":{…}}, then exits 0.
 */
import { Ledger } from '../../src/ledger/ledger.js';
import { createLogger } from '../../src/log.js';
import { ScheduleFirer } from '../../src/schedules/firer.js';
import { WakeChannel } from '../../src/wake/wake-channel.js';
import { testTxnMode } from './ledger.js';

function emit(event: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

async function main(): Promise<void> {
  const url = process.env.LW_DB_URL;
  if (!url) throw new Error('child-schedule-firer: LW_DB_URL is required');
  const ledger = new Ledger({ url, poolSize: 4, ...testTxnMode() });
  const redis = process.env.LW_REDIS_URL;
  const wake = redis ? new WakeChannel({ redis, keyPrefix: process.env.LW_KEY_PREFIX ?? 'lw:' }) : undefined;
  const firer = new ScheduleFirer({
    ledger,
    wake,
    log: createLogger('child-schedule-firer'),
    checkIntervalMs: Number(process.env.LW_CHECK_MS ?? 1000),
    clockOffsetMs: Number(process.env.LW_CLOCK_OFFSET_MS ?? 0),
  });
  let stopping = false;
  const shutdown = async (): Promise<void> => {
    if (stopping) process.exit(1);
    stopping = true;
    await firer.stop();
    emit({ event: 'stopped', counters: firer.counters });
    await wake?.close();
    await ledger.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown());
  process.on('SIGINT', () => void shutdown());
  await ledger.assertSchemaCurrent();
  firer.start();
  emit({ event: 'ready' });
}

main().catch((error: unknown) => {
  process.stderr.write(`child-schedule-firer failed: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(2);
});
