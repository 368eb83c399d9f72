import { describe, expect, test } from 'vitest';
import type { Consumer } from '../src/consumer/consumer.js';
import type { HandlerEntry } from '../src/consumer/types.js';
import { ValidationError } from '../src/errors.js';
import type { Producer } from '../src/producer/producer.js';
import { ledgerReadiness, startAdminServer } from '../src/supervisor/admin-server.js';
import { LanewakeMetrics } from '../src/supervisor/metrics.js';
import { consumerHarness } from './support/consumer-harness.js';
import { mustGet } from './support/items.js';
import { waitFor, type TestLedger } from './support/ledger.js';

// ctx.progress through a consumer (docs/design/batches-and-steps.md, "Progress").

const harness = consumerHarness('progress');

async function setUp(
  handlers: Record<string, HandlerEntry>,
): Promise<{ tl: TestLedger; consumer: Consumer; queue: string; producer: Producer }> {
  const { tl, queue, producer } = await harness.setUp();
  return { tl, consumer: await harness.consumer(handlers, { concurrency: 2 }), queue, producer };
}

/** A promise and the function that resolves it. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe('progress', () => {
  test(
    'many reports a second are written at most once a second, shown while ' +
      'running (ledger, admin API, metrics), and the terminal item keeps the last',
    async () => {
      const finish = gate();
      let reports = 0;
      const { tl, consumer, queue, producer } = await setUp({
        long: async (_job, ctx) => {
          // A report every 20 ms until told to finish: far more than one a second.
          for (let p = 0; ; p = Math.min(99, p + 1)) {
            ctx.progress(p);
            reports++;
            const done = await Promise.race([
              finish.opened.then(() => true),
              new Promise<false>((r) => setTimeout(() => r(false), 20)),
            ]);
            if (done) break;
          }
          ctx.progress({ phase: 'done', rows: 1200 });
          return 'ok';
        },
      });
      const metrics = new LanewakeMetrics({ defaultMetrics: false });
      harness.cleanup(metrics.observeConsumer(consumer));
      const admin = await startAdminServer({
        port: 0,
        metrics,
        readiness: () => ledgerReadiness(tl.ledger),
        dashboard: { backend: () => ({ ledger: tl.ledger }) },
        version: 'test',
      });
      harness.cleanup(() => admin.close());

      const startedAt = Date.now();
      const { id } = await producer.enqueue({ queue, type: 'long', payload: { secret: 'kept from operators' } });
      // The ledger shows a report while the item runs.
      const running = await waitFor(
        async () => {
          const item = await mustGet(tl.ledger, id);
          return item.state === 'processing' && typeof item.progress === 'number' ? item : undefined;
        },
        10_000,
        'progress in the ledger while running',
      );
      expect(running.progress).toBeGreaterThanOrEqual(0);

      const api = (await (await fetch(`${admin.url}/api/items/${id}`)).json()) as {
        item: Record<string, unknown>;
        steps: unknown[];
        why: unknown;
      };
      expect(api.item).toMatchObject({ id, state: 'processing' });
      expect(api.why).toMatchObject({ id, code: 'processing', details: { owner: consumer.name } });
      const live = (await (await fetch(`${admin.url}/api/consumers`)).json()) as unknown[];
      expect(live).toContainEqual(expect.objectContaining({ name: consumer.name, queue }));
      expect(typeof api.item.progress).toBe('number');
      expect(api.item).not.toHaveProperty('payload');
      const text = await metrics.metrics();
      expect(text).toMatch(new RegExp(`^lanewake_progress_percent\\{queue="${queue}",type="long"\\} \\d+`, 'm'));

      // Let it run a while longer, past many reports (a loaded machine makes fewer a second), then finish.
      await waitFor(() => (reports > 50 && Date.now() - startedAt > 2500) || undefined, 30_000, '50 reports');
      finish.open();
      const done = await waitFor(
        async () => {
          const item = await mustGet(tl.ledger, id);
          return item.state === 'completed' ? item : undefined;
        },
        10_000,
        'completed',
      );
      const ranMs = Date.now() - startedAt;
      expect(done.progress).toEqual({ phase: 'done', rows: 1200 });
      expect(reports).toBeGreaterThan(50);
      // One write per started second of the run at most, plus the one before the outcome.
      expect(consumer.counters.progressWrites).toBeGreaterThanOrEqual(2);
      expect(consumer.counters.progressWrites).toBeLessThanOrEqual(Math.ceil(ranMs / 1000) + 1);
      expect(await metrics.metrics()).toMatch(
        new RegExp(`^lanewake_progress_writes_total\\{queue="${queue}"\\} ${consumer.counters.progressWrites}$`, 'm'),
      );

      expect((await fetch(`${admin.url}/api/items/no-such-item`)).status).toBe(404);
      const bad = await fetch(`${admin.url}/api/items/${encodeURIComponent('not an id!')}`);
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { fields: string[] }).fields).toEqual(['id']);
    },
  );

  test(
    'a report written before ctx.transaction completes the item is ' +
      'kept, and a bad report is a ValidationError naming progress',
    async () => {
      const { tl, queue, producer } = await setUp({
        tx: async (_job, ctx) => {
          const refused: string[] = [];
          for (const bad of [101, -1, Number.NaN, 'half', [1, 2], null, { big: 'x'.repeat(5000) }]) {
            try {
              ctx.progress(bad as number);
            } catch (error) {
              if (error instanceof ValidationError) refused.push(error.fields.join());
            }
          }
          ctx.progress(75);
          return ctx.transaction(async () => refused);
        },
      });
      const { id } = await producer.enqueue({ queue, type: 'tx', payload: {} });
      const done = await waitFor(
        async () => {
          const item = await mustGet(tl.ledger, id);
          return item.state === 'completed' ? item : undefined;
        },
        10_000,
        'completed',
      );
      expect(done.result).toEqual(Array.from({ length: 7 }, () => 'progress'));
      expect(done.progress).toBe(75);
    },
  );
});
