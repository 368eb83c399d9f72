/**
 * What the latency workload (bench/workloads/latency.ts) runs on each server URL, the proxy's or the server's own:
 * a drain of no-op jobs, jobs arriving one at a time into an idle consumer, and each ledger call of the one-job
 * path timed alone. Every drain checks each job ran once.
 */
import { Consumer } from '../../src/consumer/consumer.js';
import { Ledger } from '../../src/ledger/ledger.js';
import type { ClaimedItem } from '../../src/ledger/types.js';
import { Producer } from '../../src/producer/producer.js';
import { WakeChannel } from '../../src/wake/wake-channel.js';
import { median, sleep } from '../support.js';
import { environment, noopConsumer, REDIS_URL, silent, verifyOnce, waitUntil } from '../workload.js';

/** `jobs` no-op items pre-enqueued in batches of 500, drained by one consumer at `concurrency`: jobs/s. */
export async function throughput(concurrency: number, jobs: number, serverUrl: string): Promise<number> {
  const env = await environment(true, serverUrl);
  try {
    const producer = new Producer({ ledger: env.ledger, wake: env.wake });
    for (let i = 0; i < jobs; i += 500) {
      const n = Math.min(500, jobs - i);
      await producer.enqueueMany(
        Array.from({ length: n }, (_, k) => ({ queue: env.queue, type: 'noop', payload: { n: i + k } })),
      );
    }
    const seen = new Map<string, number>();
    const consumer = noopConsumer(env, concurrency, seen);
    const t0 = performance.now();
    await consumer.start();
    await waitUntil(() => consumer.counters.completed >= jobs, 300_000, 'the backlog to drain');
    const elapsed = performance.now() - t0;
    await consumer.stop();
    await verifyOnce(env, seen, jobs);
    return (jobs / elapsed) * 1000;
  } finally {
    await env.close();
  }
}

/**
 * Jobs enqueued one at a time at `ratePerS` (open loop) into an idle consumer at concurrency 32: enqueue→handler
 * start, ms. With `ownProducer` the producer has its own pool and wake channel, as one in another process has.
 */
export async function arrivals(ownProducer: boolean, jobs: number, ratePerS: number, url: string): Promise<number[]> {
  const env = await environment(true, url);
  const own = ownProducer
    ? {
        ledger: new Ledger({ url: env.url, poolSize: 4 }),
        wake: new WakeChannel({ redis: REDIS_URL, keyPrefix: env.keyPrefix, logger: silent }),
      }
    : undefined;
  try {
    const producer = new Producer(own ?? { ledger: env.ledger, wake: env.wake });
    const seen = new Map<string, number>();
    const latencies: number[] = [];
    const ping = async (job: { id: string; payload: { t: number } }): Promise<void> => {
      latencies.push(performance.now() - job.payload.t);
      seen.set(job.id, (seen.get(job.id) ?? 0) + 1);
    };
    const consumer = new Consumer({
      ...{ ledger: env.ledger, wake: env.wake, queue: env.queue, concurrency: 32, logger: silent },
      handlers: { ping },
    });
    await consumer.start();
    if (own) {
      await waitUntil(() => consumer.counters.sweeps >= 1, 10_000, 'the first sweep');
      await own.ledger.capabilities(); // its pool connects before the clock starts, as a running process's has
    } else {
      await sleep(300); // the consumer settles into idle (group joined, first sweep done)
    }
    const start = performance.now();
    for (let i = 0; i < jobs; i++) {
      const wait = start + (i * 1000) / ratePerS - performance.now();
      if (wait > 0) await sleep(wait);
      await producer.enqueue({ queue: env.queue, type: 'ping', payload: { t: performance.now() } });
    }
    await waitUntil(() => consumer.counters.completed >= jobs, 60_000, 'every job to run');
    await consumer.stop();
    await verifyOnce(env, seen, jobs);
    return latencies;
  } finally {
    await own?.wake.close();
    await own?.ledger.close();
    await env.close();
  }
}

export const CALLS = ['enqueue', 'claim by id', 'completion', 'laned enqueue', 'laned completion'] as const;
/** Median ms per call over `jobs` jobs (the first tenth left out: pools connect, plans warm). */
export type CallTimes = Record<(typeof CALLS)[number], number>;

/** Each ledger call of the one-job path, one job at a time, laneless and laned. */
export async function ledgerCallTimes(serverUrl: string, jobs: number): Promise<CallTimes> {
  const env = await environment(false, serverUrl);
  try {
    const { ledger, queue } = env;
    const times = Object.fromEntries(CALLS.map((c) => [c, [] as number[]])) as Record<keyof CallTimes, number[]>;
    const timed = async <T>(key: keyof CallTimes, fn: () => Promise<T>): Promise<T> => {
      const t0 = performance.now();
      const value = await fn();
      times[key].push(performance.now() - t0);
      return value;
    };
    const claim = async (id: string): Promise<ClaimedItem> => {
      const [item] = await ledger.claimByIds({ queue, owner: 'bench', leaseMs: 30_000, ids: [id] });
      if (!item) throw new Error(`claim of ${id} won nothing`);
      return item;
    };
    for (let i = 0; i < jobs; i++) {
      const plain = await timed('enqueue', () => ledger.enqueue({ queue, type: 'noop', payload: { n: i } }));
      const item = await timed('claim by id', () => claim(plain.id));
      await timed('completion', () => ledger.completeMany([{ handle: item }]));
      const laned = await timed('laned enqueue', () =>
        ledger.enqueue({ queue, type: 'noop', lane: 'l0', payload: {} }),
      );
      const head = await claim(laned.id);
      await timed('laned completion', () => ledger.completeMany([{ handle: head }]));
    }
    const skip = Math.ceil(jobs / 10);
    return Object.fromEntries(CALLS.map((c) => [c, median(times[c].slice(skip))])) as CallTimes;
  } finally {
    await env.close();
  }
}
