// One worker process of the steady workload (bench/workloads/steady.ts): a consumer alone in its process,
// from the compiled package (dist/), as a deployed worker runs it. Its
// handler writes one effect row in ctx.transaction, as the origin's workers
// wrote their results, and stamps its start on CLOCK_MONOTONIC
// (process.hrtime, which every process of the machine shares), against the
// stamp the producer put in the payload. Configured by env; over IPC:
// 'ready' once started; on 'stop' it drains, sends its figures and exits.
import { sql } from 'kysely';
import * as lanewake from '../dist/index.js';
import * as retry from '../dist/ledger/retry.js';

const { Consumer, Ledger, WakeChannel, createLogger } = lanewake;
// When each job's wake-up was read (for late starts: read promptly, or late); older builds have no such channel.
const wakeReadAtMs = new Map();
const dc = await import('node:diagnostics_channel');
dc.subscribe('lanewake:wake-read', (m) => {
  for (const id of m.ids) if (!wakeReadAtMs.has(id)) wakeReadAtMs.set(id, m.atMs);
});
// Older builds (compared in alternated pairs) have no diagnostics channels or conflict counts.
const conflictRetries = retry.conflictRetries ?? (() => new Map());

const env = (name) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is required`);
  return v;
};
const concurrency = Number(env('LW_CONCURRENCY'));
const mode = process.env.LW_TIDB_TXN_MODE;
const ledger = new Ledger({
  url: env('LW_DATABASE_URL'),
  poolSize: concurrency + 2,
  ...(mode ? { tidbTxnMode: mode } : {}),
});
const redis = env('LW_REDIS_URL');
const wake = new WakeChannel({
  redis: redis.startsWith('redis+cluster://') ? { cluster: clusterSeeds(redis) } : redis,
  keyPrefix: env('LW_KEY_PREFIX'),
});

function clusterSeeds(url) {
  return url
    .slice('redis+cluster://'.length)
    .split(',')
    .map((hp) => {
      const [host, port] = hp.split(':');
      return { host, port: Number(port) };
    });
}

/** Per job: enqueue→start in µs. */
const starts = [];
/** The first 20 jobs that started over 200 ms after their enqueue: their ids, for the main process to look up. */
const late = [];
let rounds = 0;
let roundItems = 0;
const consumer = new Consumer({
  ledger,
  wake,
  queue: env('LW_QUEUE'),
  concurrency,
  logger: createLogger('bench-steady', 'warn'),
  handlers: {
    job: async (job, ctx) => {
      const startedNs = process.hrtime.bigint();
      const us = Number((startedNs - BigInt(job.payload.t)) / 1000n);
      starts.push(us);
      if (us > 200_000 && late.length < 20)
        late.push({
          id: job.id,
          us,
          attempt: job.attempt,
          wakeReadBeforeStartMs: wakeReadAtMs.has(job.id) ? Date.now() - wakeReadAtMs.get(job.id) : null,
        });
      await ctx.transaction(async (trx) => {
        await sql`INSERT INTO effects (item_id, lane, written_at) VALUES (${job.id}, ${job.lane}, NOW(6))`.execute(trx);
      });
    },
  },
});
consumer.on('claimRound', (r) => {
  rounds++;
  roundItems += r.claimed;
});
await consumer.start();
const cpuAtStart = process.cpuUsage();
process.send?.({ type: 'ready' });
process.on('message', async (m) => {
  if (m?.type !== 'stop') return;
  await consumer.stop();
  const c = consumer.counters;
  const cpu = process.cpuUsage(cpuAtStart);
  // Sent before the exit, not just queued: a backlog's figures are large, and an exit drops what the channel still
  // holds.
  await new Promise(
    (resolve) =>
      process.send?.(
        {
          type: 'figures',
          startsUs: starts,
          late,
          completed: c.completed,
          claimRounds: rounds,
          claimedByRounds: roundItems,
          handedOver: c.handedOver,
          handoffsRecovered: c.handoffsRecovered ?? 0,
          claimedWithCompletion: c.claimedWithCompletion,
          offersMade: c.offersMade,
          conflictRetries: Object.fromEntries(conflictRetries()),
          cpuMs: (cpu.user + cpu.system) / 1000,
        },
        resolve,
      ) ?? resolve(),
  );
  await wake.close();
  await ledger.close();
  process.exit(0);
});
