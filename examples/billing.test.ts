import { randomUUID } from 'node:crypto';
import { Kysely, MysqlDialect, sql } from 'kysely';
import { createPool } from 'mysql2';
import { afterAll, expect, test } from 'vitest';
import { Ledger, Producer } from 'lanewake';
// #region import
import { createTestRunner } from 'lanewake/testing';
// #endregion import
import { jobs, billingHandlers, type AppDb } from './jobs.js';

const url = process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/app_test';
const ledger = new Ledger({ url });
await ledger.migrate({ createDatabase: true });
const db = new Kysely<AppDb>({ dialect: new MysqlDialect({ pool: createPool(url) }) });
await sql`CREATE TABLE IF NOT EXISTS invoices (order_id VARCHAR(64) NOT NULL)`.execute(db);
const runner = createTestRunner({ ledger });
afterAll(() => Promise.all([ledger.close(), db.destroy()]));

test('invoice.send writes the invoice in the handler transaction', async () => {
  const orderId = randomUUID();
  await db
    .transaction()
    .execute(async (trx) => {
      const r = await runner.run(billingHandlers['invoice.send'], { payload: { orderId } }, { db: trx });
      expect(r).toMatchObject({ outcome: 'completed', result: { sent: true } });
      expect(await trx.selectFrom('invoices').where('order_id', '=', orderId).selectAll().execute()).toHaveLength(1);
      throw new RollbackTest(); // leave nothing behind
    })
    .catch((e) => {
      if (!(e instanceof RollbackTest)) throw e;
    });
});

test('the billing queue drains', async () => {
  const orderId = randomUUID(); // this run's own: earlier runs' invoices stay in the table
  const producer = jobs.producer(new Producer({ ledger }));
  await producer.enqueue('billing', 'invoice.send', { orderId });
  const items = await runner.drain({ queue: 'billing', handlers: billingHandlers });
  expect(items).toEqual([expect.objectContaining({ state: 'completed', attempts: 1 })]);
  expect(await db.selectFrom('invoices').where('order_id', '=', orderId).selectAll().execute()).toHaveLength(1);
});

class RollbackTest extends Error {}
