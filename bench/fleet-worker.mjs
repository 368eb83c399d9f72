// One replica of the fleet workload (bench/workloads/fleet.ts): a consumer alone in its process, from the
// compiled package (dist/), as a deployed worker runs it. Configured by env.
// Over IPC: 'ready' once started; on 'stop', its figures, then it exits.
import { Consumer, Ledger, WakeChannel, createLogger } from '../dist/index.js';

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is required`);
  return v;
};
const concurrency = Number(env('LW_CONCURRENCY'));
const ledger = new Ledger({ url: env('LW_DATABASE_URL'), poolSize: Math.min(4, concurrency + 1) });
const redisUrl = env('LW_REDIS_URL');
const wake = new WakeChannel({ redis: redisUrl, keyPrefix: env('LW_KEY_PREFIX') });
let firstStartMs;
let rounds = 0;
let emptyRounds = 0;
// Set on 'mark' (after a warm-up drain): the figures count from there.
let base = { claimed: 0, completed: 0, wakeEntriesRead: 0 };
const consumer = new Consumer({
  ledger,
  wake,
  queue: env('LW_QUEUE'),
  concurrency,
  logger: createLogger('bench-fleet', 'warn'),
  handlers: {
    noop: async () => {
      // Wall clock with sub-ms precision, comparable across processes on one host.
      firstStartMs ??= performance.timeOrigin + performance.now();
    },
  },
});
consumer.on('claimRound', (r) => {
  rounds++;
  if (r.claimed === 0) emptyRounds++;
});
await consumer.start();
let cpuAtReady = process.cpuUsage();
process.send?.({ type: 'ready' });
process.on('message', async (m) => {
  if (m?.type === 'mark') {
    firstStartMs = undefined;
    rounds = 0;
    emptyRounds = 0;
    const c = consumer.counters;
    base = { claimed: c.claimed, completed: c.completed, wakeEntriesRead: c.wakeEntriesRead };
    cpuAtReady = process.cpuUsage();
    process.send?.({ type: 'marked' });
    return;
  }
  if (m?.type !== 'stop') return;
  await consumer.stop();
  const c = consumer.counters;
  process.send?.({
    type: 'figures',
    firstStartMs,
    claimed: c.claimed - base.claimed,
    completed: c.completed - base.completed,
    rounds,
    emptyRounds,
    wakeEntriesRead: c.wakeEntriesRead - base.wakeEntriesRead,
    // This process's CPU from 'ready' (or 'mark') to 'stop', seconds (user + system).
    cpuS: (() => {
      const u = process.cpuUsage(cpuAtReady);
      return (u.user + u.system) / 1e6;
    })(),
  });
  await wake.close();
  await ledger.close();
  process.exit(0);
});
