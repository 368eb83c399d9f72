/**
 * Rate limits (docs/BENCHMARKS.md, "Capacity"): 4 consumers × 8 slots in one process, a type limited to 20
 * starts a second per key; 1,000 items of key a and 200 of key b enqueued together. Per key: the busiest second
 * of starts on the ledger's clock (≤ 20 is the promise), the rate from first to last start, and the releases per
 * item (the refusals that sent an item back to wait for its turn).
 */
import { sql } from 'kysely';
import { defineHandler } from '../../src/consumer/types.js';
import { codeRevision, fmt } from '../support.js';
import { consumers, defineWorkload, drain, enqueueMade, scaled, withFreshLedger } from '../workload.js';

const PER_KEY = { a: scaled(1000), b: scaled(200) };
const TOTAL = PER_KEY.a + PER_KEY.b;
const MAX = 20;
const PER_MS = 1000;

interface Result {
  released: number;
  /** Per key: items, busiest second, starts per second first to last. */
  keys: [string, number, number, number][];
}

export default defineWorkload<'rate', Result>({
  about: 'a rate-limited type, two keys: the busiest second of starts per key (Capacity)',
  variants: ['rate'],
  label: () => 'rate limit',
  runs: 1,
  measure: () =>
    withFreshLedger('lwrate', async (env) => {
      const queue = 'rate';
      let released = 0;
      const call = defineHandler<{ api: string }>({
        rateLimit: { key: (p) => p.api, max: MAX, perMs: PER_MS },
        handle: async () => undefined,
      });
      const cs = consumers(env, 4, { queue, concurrency: 8, handlers: { call } });
      for (const c of cs) c.on('outcome', (_item, outcome) => void (outcome === 'released' && released++));
      // Consumers first, then the items, so the limiter sees them arrive.
      const during = (): Promise<void> =>
        enqueueMade(env.producer, TOTAL, (n) => ({ queue, type: 'call', payload: { api: n < PER_KEY.a ? 'a' : 'b' } }));
      await drain(cs, TOTAL, { during, pollMs: 200 });
      const keys = await Promise.all(
        (['a', 'b'] as const).map(async (api): Promise<Result['keys'][number]> => {
          const r = await sql<{ at: Date }>`SELECT started_at AS at FROM ${env.ledger.tables.items}
            WHERE queue = ${queue} AND JSON_UNQUOTE(JSON_EXTRACT(payload, '$.api')) = ${api}
            ORDER BY started_at`.execute(env.ledger.db);
          const starts = r.rows.map((x) => x.at.getTime());
          let busiest = 0;
          for (let i = 0, from = 0; i < starts.length; i++) {
            while (starts[i]! - starts[from]! >= PER_MS) from++;
            busiest = Math.max(busiest, i - from + 1);
          }
          const spanS = (starts[starts.length - 1]! - starts[0]!) / 1000;
          return [api, starts.length, busiest, (starts.length - 1) / spanS];
        }),
      );
      return { released, keys };
    }),
  line: (_, r) => `${fmt(r.released / TOTAL, 2)} releases per item`,
  report: (of) =>
    of('rate').map((r) => ({
      title:
        `Rate limits: ${MAX} starts per ${PER_MS} ms per key, 4 consumers × 8 slots in one process, code ` +
        `${codeRevision()}; ${fmt(r.released / TOTAL, 2)} releases per item`,
      headers: ['key', 'busiest second (starts)', 'starts per second, first to last'],
      rows: r.keys.map(([api, n, busiest, rate]) => [`key ${api}: ${fmt(n)} items`, String(busiest), fmt(rate, 1)]),
      align: ['left', 'right', 'right'],
    })),
});
