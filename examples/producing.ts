import { once } from 'node:events';
import { sql } from 'kysely';
import { z } from 'zod';
import { Consumer, Ledger, PermanentError, Producer, WakeChannel, defineHandler } from 'lanewake';

const ledger = new Ledger({ url: process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/app' });
await ledger.migrate({ createDatabase: true }); // the database if missing, and the tables (idempotent)
await sql`CREATE TABLE IF NOT EXISTS invoices (order_id VARCHAR(64) NOT NULL)`.execute(ledger.db); // your table
const wake = new WakeChannel({ redis: process.env.LANEWAKE_REDIS_URL ?? 'redis://127.0.0.1:6379' });
const producer = new Producer({ ledger, wake });

const sendInvoice = defineHandler({
  schema: z.object({ orderId: z.string() }), // bad payloads end dead: invalid_payload
  handle: async (job, ctx) => {
    ctx.signal.throwIfAborted(); // cancelled, deadline, shutdown, lease lost
    if (job.payload.orderId.startsWith('test-')) throw new PermanentError('test orders are never invoiced');
    return ctx.transaction(async (trx) => {
      // writes + completion commit together
      await sql`INSERT INTO invoices (order_id) VALUES (${job.payload.orderId})`.execute(trx);
      return { sent: true }; // the item's result
    });
  },
});
const consumer = new Consumer({
  ledger,
  wake,
  queue: 'billing',
  concurrency: 16,
  handlers: { 'invoice.send': sendInvoice },
});
await consumer.start();
const ended = once(consumer, 'outcome'); // [item, outcome] when a run ends
await producer.enqueue({ queue: 'billing', type: 'invoice.send', lane: 'customer:42', payload: { orderId: 'o-1' } });
const [item, outcome] = await ended;
console.log(item.type, outcome); // invoice.send completed
await consumer.stop({ drainTimeoutMs: 30_000 }); // at shutdown: lets running handlers finish
await Promise.all([wake.close(), ledger.close()]); // its connections closed, the process can exit
