import { randomBytes } from 'node:crypto';
import { Consumer } from '../src/consumer/consumer.js';
import { PermanentError } from '../src/consumer/errors.js';
import type { HandlerEntry } from '../src/consumer/types.js';
import type { Ledger } from '../src/ledger/ledger.js';
import { Producer } from '../src/producer/producer.js';
import type { WakeChannel } from '../src/wake/wake-channel.js';

// A realistic demo workload for the dashboard's screenshots (scripts/dashboard-screenshots.ts): four queues with
// lanes, keys, steps and progress, dead items of several failure classes, scheduled work, a lane held by a slow
// head, and a paused queue with work piling up.

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
  });

const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)] as T;
const chance = (p: number): boolean => Math.random() < p;

export interface DemoWorkload {
  /** The queues, in the order they were created. */
  queues: readonly string[];
  /** Runs the steady workload for `ms`. */
  run(ms: number): Promise<void>;
  /** Pauses `billing` and enqueues what then piles up behind the pause. */
  pauseBilling(): Promise<void>;
  stop(): Promise<void>;
}

export async function startDemoWorkload(ledger: Ledger, wake: WakeChannel): Promise<DemoWorkload> {
  const producer = new Producer({ ledger, wake });
  const hold = new AbortController();
  const users = Array.from({ length: 9 }, (_, i) => `user-${1040 + i * 7}`);
  const accounts = ['acct-anvil', 'acct-birch', 'acct-cobalt', 'acct-delta'];
  const tenants = ['tenant-acme', 'tenant-globex', 'tenant-initech'];

  const emails: Record<string, HandlerEntry> = {
    'send-welcome': async (job) => {
      await sleep(20 + Math.random() * 60);
      const p = job.payload as { to: string };
      if (p.to.endsWith('@example.invalid'))
        throw new PermanentError(`550 5.1.1 <${p.to}>: mailbox unavailable`, 'smtp_rejected');
    },
    'send-newsletter': async (_job, ctx) => {
      // The held lane's head: runs until the demo ends.
      ctx.progress({ sent: 1200, of: 5000 });
      await sleep(600_000, hold.signal);
    },
  };
  const billing: Record<string, HandlerEntry> = {
    charge: async (job) => {
      await sleep(30 + Math.random() * 80);
      if ((job.payload as { cents: number }).cents % 11 === 0)
        throw new Error('card processor timeout: no answer from gateway.payments.internal:443 within 3000 ms');
    },
  };
  const reports: Record<string, HandlerEntry> = {
    'build-report': async (job, ctx) => {
      const rows = await ctx.step('query', async () => ({ rows: 1800 + Math.floor(Math.random() * 400) }));
      ctx.progress({ phase: 'render', rows: rows.rows });
      await sleep(150 + Math.random() * 250);
      await ctx.step('render', async () => ({ pages: Math.ceil(rows.rows / 50) }));
      ctx.progress(100);
      return { url: `s3://reports/${job.id}.pdf` };
    },
  };
  const webhooks: Record<string, HandlerEntry> = {
    deliver: async (job) => {
      await sleep(10 + Math.random() * 40);
      if ((job.payload as { endpoint: string }).endpoint.includes('/gone'))
        throw new PermanentError('HTTP 410 Gone from https://hooks.initech.example/gone', 'http_gone');
    },
  };

  const base = { ledger, wake, pollIntervalMs: 1_000, backoff: { baseMs: 300, factor: 2, maxMs: 2_000, jitter: 0.2 } };
  const consumers = [
    new Consumer({ ...base, name: 'web-1:emails', queue: 'emails', concurrency: 6, handlers: emails }),
    new Consumer({ ...base, name: 'web-2:emails', queue: 'emails', concurrency: 6, handlers: emails }),
    new Consumer({ ...base, name: 'pay-1:billing', queue: 'billing', concurrency: 4, handlers: billing }),
    new Consumer({ ...base, name: 'batch-1:reports', queue: 'reports', concurrency: 2, handlers: reports }),
    new Consumer({ ...base, name: 'edge-1:webhooks', queue: 'webhooks', concurrency: 8, handlers: webhooks }),
  ];
  for (const c of consumers) await c.start();

  // A lane held by a slow head, and scheduled work that is not due yet.
  await producer.enqueue({ queue: 'emails', type: 'send-newsletter', lane: 'list-weekly', payload: { issue: 214 } });
  for (let i = 0; i < 6; i++)
    await producer.enqueue({
      queue: 'emails',
      type: 'send-newsletter',
      lane: 'list-weekly',
      payload: { issue: 215 + i },
    });
  await producer.enqueueMany(
    Array.from({ length: 14 }, (_, i) => ({
      queue: 'reports',
      type: 'build-report',
      delayMs: (20 + i * 5) * 60_000,
      payload: { report: 'monthly', tenant: pick(tenants) },
    })),
  );

  let n = 0;
  const tick = async (): Promise<void> => {
    n++;
    const batch = [];
    for (let i = 0; i < 4; i++) {
      const user = pick(users);
      batch.push({
        queue: 'emails',
        type: 'send-welcome',
        lane: user,
        idempotencyKey: `welcome-${n}-${i}`,
        payload: { to: chance(0.06) ? `${user}@example.invalid` : `${user}@example.com` },
      });
    }
    for (let i = 0; i < 2; i++)
      batch.push({
        queue: 'billing',
        type: 'charge',
        lane: pick(accounts),
        maxAttempts: 3,
        payload: { cents: 100 + Math.floor(Math.random() * 9000) },
      });
    for (let i = 0; i < 5; i++) {
      const tenant = pick(tenants);
      batch.push({
        queue: 'webhooks',
        type: 'deliver',
        concurrencyKey: tenant,
        payload: {
          endpoint: chance(0.04) ? 'https://hooks.initech.example/gone' : `https://hooks.${tenant}.example/in`,
          event: 'order.paid',
        },
      });
    }
    if (n % 3 === 0)
      batch.push({ queue: 'reports', type: 'build-report', payload: { report: 'daily', tenant: pick(tenants) } });
    await producer.enqueueMany(batch);
  };

  return {
    queues: ['emails', 'billing', 'reports', 'webhooks'],
    run: async (ms) => {
      const start = Date.now();
      while (Date.now() < start + ms) {
        await tick();
        // Traffic in waves of about three minutes, so the charts have a shape.
        const wave = 0.5 + 0.5 * Math.sin((Date.now() - start) / 30_000);
        await sleep(120 + 500 * wave * Math.random());
      }
    },
    pauseBilling: async () => {
      await producer.pause('billing');
      await producer.enqueueMany(
        Array.from({ length: 23 }, (_, i) => ({
          queue: 'billing',
          type: 'charge',
          lane: pick(accounts),
          payload: { cents: 500 + i * 10 },
        })),
      );
    },
    stop: async () => {
      hold.abort();
      for (const c of consumers) await c.stop({ drainTimeoutMs: 2_000 }).catch(() => undefined);
    },
  };
}

export function demoDatabaseName(): string {
  return `lw_dashboard_demo_${randomBytes(4).toString('hex')}`;
}
