// The producer of bench/latency-breakdown.ts, alone in its process as a web
// process's would be: its own pool and wake channel. Configured by env; on
// 'go' over IPC it enqueues LW_JOBS jobs one by one at LW_RATE per second,
// then sends each job's timestamps (wall clock with sub-ms precision,
// comparable across processes on one host) and exits.
import { Ledger } from '../src/ledger/ledger.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';

const env = (name: string): string => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`${name} is required`);
  return v;
};
const now = (): number => performance.timeOrigin + performance.now();

interface Stamps {
  id: string;
  /** enqueue called */
  called: number;
  /** the look for a consumer's offer answered (= called when the producer did not look) */
  offered: number;
  /** the INSERT committed (the ledger call returned) */
  committed: number;
  /** the wake-up's XADD answered, or the handoff's */
  published: number;
  /** the item went inserted claimed under an offer, and was handed over */
  handedOver: boolean;
}

const ledger = new Ledger({ url: env('LW_DATABASE_URL'), poolSize: 2 });
const wake = new WakeChannel({ redis: env('LW_REDIS_URL'), keyPrefix: env('LW_KEY_PREFIX') });
const producer = new Producer({ ledger, wake });
let offeredAt = 0;
let committedAt = 0;
let publishedAt = 0;
let handedOver = false;
// Observed on the instances, not replaced: each call goes on to the real method.
const enqueueClaiming = ledger.enqueueClaiming.bind(ledger);
ledger.enqueueClaiming = async (...args) => {
  const r = await enqueueClaiming(...args);
  committedAt = now();
  return r;
};
const takeOffer = wake.offers.take.bind(wake.offers);
wake.offers.take = async (...args) => {
  const taken = await takeOffer(...args);
  offeredAt = now();
  if (!taken) return taken;
  return {
    ...taken,
    handOver: async (items) => {
      const sent = await taken.handOver(items);
      publishedAt = now();
      handedOver = items.length > 0;
      return sent;
    },
  };
};
const publish = wake.publish.bind(wake);
wake.publish = async (...args) => {
  const sent = await publish(...args);
  publishedAt = now();
  return sent;
};

await ledger.capabilities();
await wake.usable();
process.send?.({ type: 'ready' });
process.on('message', async (m: { type?: string }) => {
  if (m?.type !== 'go') return;
  const jobs = Number(env('LW_JOBS'));
  const interval = 1000 / Number(env('LW_RATE'));
  const stamps: Stamps[] = [];
  const start = performance.now();
  for (let i = 0; i < jobs; i++) {
    const wait = start + i * interval - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const called = now();
    offeredAt = called;
    handedOver = false;
    const r = await producer.enqueue({ queue: env('LW_QUEUE'), type: 'noop', payload: { i } });
    stamps.push({ id: r.id, called, offered: offeredAt, committed: committedAt, published: publishedAt, handedOver });
  }
  process.send?.({ type: 'stamps', stamps });
  await wake.close();
  await ledger.close();
  process.exit(0);
});
