// An idle replica for bench/latency-breakdown.ts --replicas: one more consumer
// of the queue in its own process, reading wake-ups like any replica. Its
// handler only counts; 'ready' over IPC once started; it stops on SIGTERM.
import { Consumer } from '../src/consumer/consumer.js';
import { Ledger } from '../src/ledger/ledger.js';
import { createLogger } from '../src/log.js';
import { WakeChannel } from '../src/wake/wake-channel.js';

const env = (name: string): string => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is required`);
  return v;
};
const ledger = new Ledger({ url: env('LW_DATABASE_URL'), poolSize: 3 });
const wake = new WakeChannel({ redis: env('LW_REDIS_URL'), keyPrefix: env('LW_KEY_PREFIX') });
const consumer = new Consumer({ ledger, wake, queue: env('LW_QUEUE'), concurrency: 32, logger: createLogger('bench-replica', 'warn'), handlers: { ping: async () => {} } });
await consumer.start();
process.send?.({ type: 'ready' });
process.once('SIGTERM', () => {
  void consumer
    .stop()
    .then(() => wake.close())
    .then(() => ledger.close())
    .finally(() => process.exit(0));
});
