import { once } from 'node:events';
import { sql } from 'kysely';
import { Consumer, Ledger, Producer, WakeChannel, type Job } from 'lanewake';

const ledger = new Ledger({ url: process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/app' });
await ledger.migrate({ createDatabase: true });
await sql`CREATE TABLE IF NOT EXISTS orders (id VARCHAR(64) NOT NULL PRIMARY KEY, state VARCHAR(16) NOT NULL)`.execute(
  ledger.db,
);
await sql`INSERT INTO orders (id, state) VALUES ('o-1', 'open') ON DUPLICATE KEY UPDATE state = 'open'`.execute(
  ledger.db,
);
const wake = new WakeChannel({ redis: process.env.LANEWAKE_REDIS_URL ?? 'redis://127.0.0.1:6379' });
const producer = new Producer({ ledger, wake });

const billing = new Consumer({
  ledger,
  wake,
  queue: 'billing',
  handlers: {
    // #region readme
    'order.pay': (job: Job<{ orderId: string }>, ctx) =>
      ctx.transaction(async (trx) => {
        await sql`UPDATE orders SET state = 'paid' WHERE id = ${job.payload.orderId}`.execute(trx);
        await ctx.enqueue({ queue: 'mail', type: 'receipt', payload: { orderId: job.payload.orderId } });
      }),
    // #endregion readme
  },
});
const mail = new Consumer({
  ledger,
  wake,
  queue: 'mail',
  handlers: {
    receipt: async (job: Job<{ orderId: string }>) => ({ mailed: job.payload.orderId }),
  },
});
await Promise.all([billing.start(), mail.start()]);
const receipt = once(mail, 'outcome'); // the follow-up item, run once the payment committed
await producer.enqueue({ queue: 'billing', type: 'order.pay', payload: { orderId: 'o-1' } });
const [item, outcome] = await receipt;
console.log(item.type, outcome); // receipt completed
await Promise.all([billing.stop(), mail.stop()]);
await Promise.all([wake.close(), ledger.close()]);
