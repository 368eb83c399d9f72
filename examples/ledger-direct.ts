import { Kysely, MysqlDialect, sql } from 'kysely';
import { createPool } from 'mysql2';
// #region design
import { Ledger } from 'lanewake';

const ledger = new Ledger({ url: process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/app' });
await ledger.migrate({ createDatabase: true }); // the database if missing, and the tables
// #endregion design

interface AppDb {
  orders: { id: string; customer_id: string };
}
const db = new Kysely<AppDb>({ dialect: new MysqlDialect({ pool: createPool(ledger.config.url) }) });
await sql`CREATE TABLE IF NOT EXISTS orders (id VARCHAR(64) PRIMARY KEY, customer_id VARCHAR(64) NOT NULL)`.execute(db);
const order = { id: `o-${Date.now()}`, customer_id: 'c-42' };
const sendInvoice = async (payload: unknown) => ({ sent: payload });

// #region design

// Enqueue, here inside your own Kysely transaction: it commits with your writes.
await db.transaction().execute(async (trx) => {
  await trx.insertInto('orders').values(order).execute();
  await ledger.enqueue(
    {
      queue: 'billing',
      type: 'invoice.send',
      lane: `customer:${order.customer_id}`,
      payload: { orderId: order.id },
      idempotencyKey: `invoice:${order.id}`,
    },
    { transaction: trx },
  );
});

// Claim lane heads under a lease, then finalize by CAS on the lease token.
const { items } = await ledger.claim({ queue: 'billing', owner: 'worker-1', limit: 16, leaseMs: 30_000 });
for (const item of items) {
  try {
    await ledger.complete(item, await sendInvoice(item.payload));
  } catch (error) {
    await ledger.retry(item, { error });
  } // backoff; dead once the budget is spent
}
// #endregion design

console.log(items.length, (await ledger.get(items[0]!.id))?.state);
await Promise.all([db.destroy(), ledger.close()]);
