import { Ledger } from '../src/ledger/ledger.js';
import { Producer } from '../src/producer/producer.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { createBenchDatabase } from './support.js';

const REDIS_URL = process.env.LANEWAKE_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A migrated ledger on a database of its own and a wake channel on keys of its own, for one run; dropped after. */
export async function withFreshLedger<T>(
  prefix: string,
  run: (ledger: Ledger, wake: WakeChannel, producer: Producer) => Promise<T>,
): Promise<T> {
  const db = await createBenchDatabase(prefix);
  const mode = process.env.LANEWAKE_BENCH_TIDB_TXN_MODE;
  const ledger = new Ledger({
    url: db.url,
    poolSize: 10,
    ...(mode === 'optimistic' || mode === 'pessimistic' ? { tidbTxnMode: mode } : {}),
  });
  const wake = new WakeChannel({ redis: REDIS_URL, keyPrefix: `${prefix}:${db.name}:` });
  try {
    await ledger.migrate();
    return await run(ledger, wake, new Producer({ ledger, wake }));
  } finally {
    await wake.close();
    await ledger.close();
    await db.drop();
  }
}

/** Enqueues `items` ahead of a drain, 1,000 at a time. */
export async function enqueueAhead(
  producer: Producer,
  items: readonly Parameters<Producer['enqueueMany']>[0][number][],
): Promise<void> {
  for (let i = 0; i < items.length; i += 1000) await producer.enqueueMany(items.slice(i, i + 1000));
}
