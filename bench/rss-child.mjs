// A consumer alone in its process, run from the compiled package (dist/), so
// its peak RSS is the consumer's own: no producer, no TypeScript loader.
// Configured by env; prints one JSON line when the backlog is drained.
import { Consumer, Ledger, WakeChannel, createLogger } from '../dist/index.js';

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is required`);
  return v;
};
const jobs = Number(env('LW_JOBS'));
const ledger = new Ledger({ url: env('LW_DATABASE_URL'), poolSize: 12 });
const wake = new WakeChannel({ redis: env('LW_REDIS_URL'), keyPrefix: env('LW_KEY_PREFIX') });
const consumer = new Consumer({
  ledger,
  wake,
  queue: env('LW_QUEUE'),
  concurrency: Number(env('LW_CONCURRENCY')),
  logger: createLogger('bench-child', 'warn'),
  handlers: { noop: async () => undefined },
});
let peak = process.memoryUsage().rss;
let peakDetail = process.memoryUsage();
const sampler = setInterval(() => {
  const m = process.memoryUsage();
  if (m.rss > peak) {
    peak = m.rss;
    peakDetail = m;
  }
}, 20);
const t0 = performance.now();
await consumer.start();
while (consumer.counters.completed < jobs) await new Promise((r) => setTimeout(r, 5));
const elapsed = performance.now() - t0;
clearInterval(sampler);
await consumer.stop();
await wake.close();
await ledger.close();
const mb = (n) => Math.round((n / (1024 * 1024)) * 10) / 10;
console.log(
  JSON.stringify({
    peakRssMb: peak / (1024 * 1024),
    jobsS: (jobs / elapsed) * 1000,
    completed: consumer.counters.completed,
    atPeak: {
      heapTotalMb: mb(peakDetail.heapTotal),
      heapUsedMb: mb(peakDetail.heapUsed),
      externalMb: mb(peakDetail.external),
      arrayBuffersMb: mb(peakDetail.arrayBuffers),
    },
  }),
);
