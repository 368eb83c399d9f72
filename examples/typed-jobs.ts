import { once } from 'node:events';
import { z } from 'zod';
import { Consumer, Ledger, Producer, WakeChannel, defineJobs } from 'lanewake';

const ledger = new Ledger({ url: process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/app' });
await ledger.migrate({ createDatabase: true });
const wake = new WakeChannel({ redis: process.env.LANEWAKE_REDIS_URL ?? 'redis://127.0.0.1:6379' });
const producer = new Producer({ ledger, wake });
const send = async (orderId: string, copies: number) => ({ orderId, copies });

// #region readme
const jobs = defineJobs({
  billing: { 'invoice.send': z.object({ orderId: z.string(), copies: z.number().int().default(1) }) },
});
const billing = jobs.producer(producer); // an unknown queue or type, or { orderId: 1 }: a compile error
await billing.enqueue('billing', 'invoice.send', { orderId: 'A1' }, { lane: 'customer:42' });
const consumer = new Consumer({
  ledger,
  wake,
  queue: 'billing',
  handlers: jobs.handlers('billing', {
    'invoice.send': async (job) => send(job.payload.orderId, job.payload.copies), // the schema's output
  }),
});
// #endregion readme

const ended = once(consumer, 'outcome');
await consumer.start();
const [item, outcome] = await ended;
console.log(item.type, outcome, JSON.stringify((await ledger.get(item.id))?.result));
await consumer.stop();
await Promise.all([wake.close(), ledger.close()]);
