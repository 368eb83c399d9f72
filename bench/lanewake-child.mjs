// A child process of the fleet and steady workloads (bench/workloads/fleet.ts, steady.ts), alone in its process
// as deployed, from the compiled package (dist/). argv[2] is its part: fleet-worker (a no-op consumer),
// steady-worker (each handler writes one effect row in ctx.transaction and stamps its start on CLOCK_MONOTONIC,
// which every process of the machine shares, against the producer's stamp), steady-producer (on 'go', LW_JOBS
// single items at LW_RATE a second, open loop, into LW_LANES lanes). Configured by env; over IPC: 'ready' once
// started; a worker on 'stop' (fleet-worker also on 'mark', after a warm-up) and the producer when done send
// their figures, then exit.
import { sql } from 'kysely';
import * as lanewake from '../dist/index.js';
import * as retry from '../dist/ledger/retry.js';

const { Consumer, Ledger, Producer, WakeChannel, createLogger } = lanewake;
const part = process.argv[2];
const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is required`);
  return v;
};
const concurrency = Number(process.env.LW_CONCURRENCY ?? 1);
const mode = process.env.LW_TIDB_TXN_MODE;
const poolSize = { 'fleet-worker': Math.min(4, concurrency + 1), 'steady-worker': concurrency + 2 }[part] ?? 8;
const ledger = new Ledger({ url: env('LW_DATABASE_URL'), poolSize, ...(mode ? { tidbTxnMode: mode } : {}) });
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
const queue = env('LW_QUEUE');
const cpuMs = (since) => {
  const u = process.cpuUsage(since);
  return (u.user + u.system) / 1000;
};

/** Sends `msg` and waits until it is out (an exit drops what the channel still holds), then exits. */
async function finish(msg) {
  await new Promise((resolve) => process.send?.(msg, resolve) ?? resolve());
  await wake.close();
  await ledger.close();
  process.exit(0);
}

if (part === 'steady-producer') {
  const producer = new Producer({ ledger, wake });
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
      // A timer's precision (about a millisecond) is enough: each job's latency runs from its own stamp.
      const left = t0 + BigInt(k) * gapNs - process.hrtime.bigint();
      if (left > 0n) await new Promise((r) => setTimeout(r, Number(left / 1_000_000n)));
      const t = process.hrtime.bigint();
      const lane = lanes > 0 ? `lane-${k % lanes}` : undefined;
      const p = producer
        .enqueue({ queue, type: 'job', lane, payload: { k, t: String(t) } })
        .then(
          () => (enqueueUs[k] = Number((process.hrtime.bigint() - t) / 1000n)),
          () => failed++,
        )
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
    }
    await Promise.all(inFlight);
    const lateMs = Number((process.hrtime.bigint() - t0) / 1_000_000n) - (jobs * Number(gapNs)) / 1e6;
    await finish({ type: 'done', enqueueUs, failed, cpuMs: cpuMs(cpuAtGo), lateMs });
  });
} else {
  const fleet = part === 'fleet-worker';
  /** steady: per job, enqueue→start in µs; fleet: the first start, wall clock comparable across processes. */
  const starts = [];
  let firstStartMs;
  let late = 0;
  let rounds = 0;
  let emptyRounds = 0;
  let roundItems = 0;
  const consumer = new Consumer({
    ledger,
    wake,
    queue,
    concurrency,
    logger: createLogger(`bench-${part}`, 'warn'),
    handlers: fleet
      ? {
          noop: async () => {
            firstStartMs ??= performance.timeOrigin + performance.now();
          },
        }
      : {
          job: async (job, ctx) => {
            const us = Number((process.hrtime.bigint() - BigInt(job.payload.t)) / 1000n);
            starts.push(us);
            // Counted up to 20 a worker, as the row always was.
            if (us > 200_000 && late < 20) late++;
            const effect = sql`INSERT INTO effects (item_id, lane, written_at) VALUES (${job.id}, ${job.lane}, NOW(6))`;
            await ctx.transaction(async (trx) => {
              await effect.execute(trx);
            });
          },
        },
  });
  consumer.on('claimRound', (r) => {
    rounds++;
    roundItems += r.claimed;
    if (r.claimed === 0) emptyRounds++;
  });
  await consumer.start();
  // fleet: figures count from 'mark' (after a warm-up drain), else from 'ready'.
  let base = { claimed: 0, completed: 0, wakeEntriesRead: 0 };
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
    if (fleet) {
      await finish({
        type: 'figures',
        firstStartMs,
        claimed: c.claimed - base.claimed,
        completed: c.completed - base.completed,
        rounds,
        emptyRounds,
        wakeEntriesRead: c.wakeEntriesRead - base.wakeEntriesRead,
        cpuS: cpuMs(cpuAtReady) / 1000,
      });
    }
    await finish({
      type: 'figures',
      startsUs: starts,
      late,
      completed: c.completed,
      claimedByRounds: roundItems,
      handedOver: c.handedOver,
      claimedWithCompletion: c.claimedWithCompletion,
      // Older builds (compared in alternated pairs) have no conflict counts.
      conflictRetries: Object.fromEntries((retry.conflictRetries ?? (() => new Map()))()),
      cpuMs: cpuMs(cpuAtReady),
    });
  });
}
