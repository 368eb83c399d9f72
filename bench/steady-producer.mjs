// The producer of the steady workload (bench/workloads/steady.ts), alone in its process as a web process's
// would be: its own pool and wake channel, from the compiled package. On
// 'go' it enqueues LW_JOBS single items at LW_RATE a second, open loop (each
// at its time, whether or not the one before has answered, as requests
// arrive), each into one of LW_LANES lanes, its payload stamped with
// CLOCK_MONOTONIC (process.hrtime) just before the call; then it sends how
// long each enqueue took (by job number), and exits.
import { Ledger, Producer, WakeChannel } from '../dist/index.js';

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is required`);
  return v;
};
const mode = process.env.LW_TIDB_TXN_MODE;
const ledger = new Ledger({ url: env('LW_DATABASE_URL'), poolSize: 8, ...(mode ? { tidbTxnMode: mode } : {}) });
const redis = env('LW_REDIS_URL');
const seeds = (url) =>
  url
    .slice('redis+cluster://'.length)
    .split(',')
    .map((hp) => ({ host: hp.split(':')[0], port: Number(hp.split(':')[1]) }));
const wake = new WakeChannel({
  redis: redis.startsWith('redis+cluster://') ? { cluster: seeds(redis) } : redis,
  keyPrefix: env('LW_KEY_PREFIX'),
});
const producer = new Producer({ ledger, wake });
const queue = env('LW_QUEUE');
const lanes = Number(env('LW_LANES'));

await ledger.capabilities();
await wake.usable();
process.send?.({ type: 'ready' });
process.on('message', async (m) => {
  if (m?.type !== 'go') return;
  const jobs = Number(env('LW_JOBS'));
  const gapNs = BigInt(Math.round(1e9 / Number(env('LW_RATE'))));
  const enqueueUs = [];
  let failed = 0;
  const inFlight = new Set();
  const cpuAtGo = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let k = 0; k < jobs; k++) {
    const dueNs = t0 + BigInt(k) * gapNs;
    // A timer's precision (about a millisecond) is enough: each job's latency runs from its own stamp.
    const left = dueNs - process.hrtime.bigint();
    if (left > 0n) await new Promise((r) => setTimeout(r, Number(left / 1_000_000n)));
    const t = process.hrtime.bigint();
    const p = producer
      .enqueue({ queue, type: 'job', lane: lanes > 0 ? `lane-${k % lanes}` : undefined, payload: { k, t: String(t) } })
      .then(
        () => (enqueueUs[k] = Number((process.hrtime.bigint() - t) / 1000n)),
        () => failed++,
      )
      .finally(() => inFlight.delete(p));
    inFlight.add(p);
  }
  await Promise.all(inFlight);
  const cpu = process.cpuUsage(cpuAtGo);
  process.send?.({
    type: 'done',
    enqueueUs,
    failed,
    cpuMs: (cpu.user + cpu.system) / 1000,
    lateMs: Number((process.hrtime.bigint() - t0) / 1_000_000n) - (jobs * Number(gapNs)) / 1e6,
  });
  await wake.close();
  await ledger.close();
  process.exit(0);
});
