import { z } from 'zod';
import { defineJobs } from 'lanewake';

export interface AppDb {
  invoices: { order_id: string };
}

export const jobs = defineJobs({ billing: { 'invoice.send': z.object({ orderId: z.string() }) } });

export const billingHandlers = jobs.withDatabase<AppDb>().handlers('billing', {
  'invoice.send': async (job, ctx) =>
    ctx.transaction(async (trx) => {
      await trx.insertInto('invoices').values({ order_id: job.payload.orderId }).execute();
      return { sent: true };
    }),
});
