// handlers.ts
import { sql } from 'kysely';
import { z } from 'zod';
import { BlockOn, Defer, PermanentError, defineHandler } from 'lanewake';

const MAIL_API = process.env.MAIL_API_URL ?? 'http://127.0.0.1:8025';

/**
 * billing / invoice.send: writes the invoice row and completes the item in
 * one transaction, so the invoice exists exactly once. Waits (BlockOn) while
 * the order is unpaid.
 */
const invoiceSend = defineHandler({
  // A payload that fails the schema ends dead, class invalid_payload, without running the handler.
  schema: z.object({ orderId: z.string().min(1), amountCents: z.number().int().positive() }),
  deadlineMs: 60_000,
  handle: async (job, ctx) => {
    ctx.signal.throwIfAborted(); // cancelled, shutdown, deadline or lease lost: end by that reason
    const { orderId, amountCents } = job.payload; // typed from the schema
    if (amountCents > 100_000_000)
      throw new PermanentError(`order ${orderId}: amount over the invoicing limit`, 'over_limit');
    // The tables live in the ledger's database: ctx.transaction runs there. fn may run
    // again if the transaction is retried (deadlock, lost connection): keep outside calls out of it.
    return ctx.transaction(async (trx) => {
      const order = await sql<{ paid_at: Date | null }>`SELECT paid_at FROM orders WHERE id = ${orderId}`.execute(trx);
      const row = order.rows[0];
      if (!row) throw new PermanentError(`order ${orderId} does not exist`, 'no_such_order');
      // Not paid yet: park this item (and its lane) until the payment service, after
      // committing the payment, calls producer.wakeDependency(`payment:${orderId}`).
      if (row.paid_at === null) throw BlockOn(`payment:${orderId}`, { maxWaitMs: 86_400_000, probeAfterMs: 3_600_000 });
      await sql`INSERT INTO invoices (order_id, amount_cents) VALUES (${orderId}, ${amountCents})`.execute(trx);
      return { invoiced: orderId }; // stored as the item's result, committed with the insert
    });
  },
});

/**
 * mail / digest.send: sends a digest page by page through an HTTP API,
 * saving a checkpoint after each page so a later attempt resumes there.
 */
const digestSend = defineHandler({
  schema: z.object({ userId: z.string().min(1), pages: z.number().int().min(1).max(50) }),
  handle: async (job, ctx) => {
    const saved = z.object({ sent: z.number().int().min(0) }).safeParse(job.checkpoint);
    for (let page = saved.success ? saved.data.sent : 0; page < job.payload.pages; page++) {
      ctx.signal.throwIfAborted();
      // fetch rejects with ctx.signal.reason when the signal aborts: the same as throwing it.
      const res = await fetch(`${MAIL_API}/digests`, {
        method: 'POST',
        // An idempotency key per page: what the handler does outside the ledger happens at least once.
        headers: { 'content-type': 'application/json', 'idempotency-key': `${job.id}:${page}` },
        body: JSON.stringify({ user: job.payload.userId, page }),
        signal: ctx.signal,
      });
      if (res.status === 429) {
        // Not now: back to pending until then, without spending an attempt.
        throw Defer(new Date(Date.now() + 1000 * Number(res.headers.get('retry-after') ?? 30)), 'mail API rate limit');
      }
      if (res.status >= 400 && res.status < 500)
        throw new PermanentError(`mail API refused page ${page}: HTTP ${res.status}`);
      if (!res.ok) throw new Error(`mail API answered HTTP ${res.status}`); // retried with backoff
      await ctx.checkpoint({ sent: page + 1 });
    }
    return { pages: job.payload.pages };
  },
});

/**
 * reports / render: a slow bulk job, one durable step per section, so a later
 * attempt skips the sections already rendered. The config below gives its
 * queue `pools: auto`, so a flood of renders leaves room for interactive work.
 */
const render = defineHandler({
  schema: z.object({ reportId: z.string().min(1), sections: z.array(z.string().min(1)).max(100) }),
  handle: async (job, ctx) => {
    const sizes: number[] = [];
    for (const section of job.payload.sections) {
      sizes.push(await ctx.step(`section:${section}`, async () => `${job.payload.reportId}/${section}`.length));
    }
    return { reportId: job.payload.reportId, sections: sizes.length };
  },
});

// { [queue]: { [type]: handler } }: a defineHandler(...) or a plain async (job, ctx) => result.
// Every queue of the config file below has its handlers here: one without stops start-up.
export const handlers = {
  billing: { 'invoice.send': invoiceSend },
  mail: {
    'digest.send': digestSend,
    'mail.ping': async () => ({ pong: true }),
  },
  reports: { render },
};
