/**
 * Rate limits (docs/BENCHMARKS.md, "Capacity"): 4 consumers of 8 slots in
 * one process, a type limited to 20 starts a second per key; 1,000 items of
 * key a and 200 of key b enqueued together. Per key: the busiest second of
 * starts on the ledger's clock (≤ 20 is the promise), the rate achieved
 * from first to last start, and the releases per item (the refusals that
 * sent an item back to wait for its turn).
 *
 *   npm run bench:rate
 *   npm run bench:rate -- --scale 0.2
 */
import { sql } from 'kysely';
import { Consumer } from '../src/consumer/consumer.js';
import { defineHandler } from '../src/consumer/types.js';
import { createLogger } from '../src/log.js';
import { enqueueAhead, withFreshLedger } from './fresh-ledger.js';
import { cliFlag, codeRevision, fmt, printTable, progress, runBenchmark, sleep } from './support.js';

const SCALE = Number(cliFlag('--scale') ?? 1);
const PER_KEY = { a: Math.round(1000 * SCALE), b: Math.round(200 * SCALE) };
const MAX = 20;
const PER_MS = 1000;

runBenchmark(async () => {
  await withFreshLedger('lwrate', async (ledger, wake, producer) => {
    const queue = 'rate';
    let released = 0;
    const call = defineHandler<{ api: string }>({
      rateLimit: { key: (p) => p.api, max: MAX, perMs: PER_MS },
      handle: async () => undefined,
    });
    const consumers = Array.from(
      { length: 4 },
      () =>
        new Consumer({
          ledger,
          wake,
          queue,
          concurrency: 8,
          logger: createLogger('bench', 'silent'),
          handlers: { call },
        }),
    );
    for (const c of consumers) {
      c.on('outcome', (_item, outcome) => void (outcome === 'released' && released++));
      await c.start();
    }
    const total = PER_KEY.a + PER_KEY.b;
    await enqueueAhead(producer, [
      ...Array.from({ length: PER_KEY.a }, () => ({ queue, type: 'call', payload: { api: 'a' } })),
      ...Array.from({ length: PER_KEY.b }, () => ({ queue, type: 'call', payload: { api: 'b' } })),
    ]);
    for (;;) {
      const done = consumers.reduce((n, c) => n + c.counters.completed, 0);
      if (done >= total) break;
      progress(`${done} of ${total} done`);
      await sleep(2000);
    }
    await Promise.all(consumers.map((c) => c.stop({ drainTimeoutMs: 2000 })));
    const rows = (['a', 'b'] as const).map(async (api) => {
      const r = await sql<{ at: Date }>`SELECT started_at AS at FROM ${ledger.tables.items}
        WHERE queue = ${queue} AND JSON_UNQUOTE(JSON_EXTRACT(payload, '$.api')) = ${api} ORDER BY started_at`.execute(
        ledger.db,
      );
      const starts = r.rows.map((x) => x.at.getTime());
      let busiest = 0;
      for (let i = 0, from = 0; i < starts.length; i++) {
        while (starts[i]! - starts[from]! >= PER_MS) from++;
        busiest = Math.max(busiest, i - from + 1);
      }
      const spanS = (starts[starts.length - 1]! - starts[0]!) / 1000;
      return [`key ${api}: ${fmt(starts.length)} items`, String(busiest), fmt((starts.length - 1) / spanS, 1)];
    });
    printTable(
      `Rate limits: ${MAX} starts per ${PER_MS} ms per key, 4 consumers × 8 slots in ` +
        `one process, code ${codeRevision()}; ${fmt(released / total, 2)} releases per ` +
        `item`,
      ['key', 'busiest second (starts)', 'starts per second, first to last'],
      await Promise.all(rows),
      ['left', 'right', 'right'],
    );
  });
});
