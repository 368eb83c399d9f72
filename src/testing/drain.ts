import { Consumer } from '../consumer/consumer.js';
import type { ConsumerSettingsInput } from '../consumer/options.js';
import type { Outcome } from '../consumer/job-outcome.js';
import type { HandlerEntry } from '../consumer/types.js';
import { exactCount } from '../ledger/bounded-count.js';
import type { Ledger } from '../ledger/ledger.js';
import type { ItemState } from '../ledger/types.js';
import type { Logger } from '../log.js';
import { sleep } from '../sleep.js';

export interface DrainOptions<DB> {
  queue: string;
  /** The queue's handlers: a map of type → handler, or `jobs.handlers(queue, …)`. */
  handlers: Record<string, HandlerEntry<DB>>;
  /** Consumer settings (concurrency, backoff, leaseMs, …); the sweep interval defaults to 20 ms. */
  consumer?: Omit<ConsumerSettingsInput, 'queue'>;
  /**
   * Wait for pending items not due yet too (a retry after its backoff, a delay, a release), as
   * Oban's `with_scheduled`: give the consumer a short `backoff` then. Default false: they stay pending.
   */
  scheduled?: boolean;
  /** Give up (and throw) when the queue is not idle by then; default 30 s. */
  timeoutMs?: number;
  logger?: Logger;
}

/** One item the drain ran, as the ledger holds it once the queue was idle. */
export interface DrainedItem {
  id: string;
  type: string;
  /** `completed`, `dead`, `pending` (a retry not due yet, a release), `blocked`, `cancelled`. */
  state: ItemState;
  /** A completed item's result, else null. */
  result: unknown;
  /** The last error text (a retried or dead item's), else null. */
  error: string | null;
  failureClass: string | null;
  /** Attempts counted so far (a claim adds one; a release or block gives it back). */
  attempts: number;
  /** How each run of it in this drain ended, in order (a retried item that ran twice: `['retried', 'completed']`). */
  runs: Outcome[];
}

/** How often the drain asks the ledger whether the queue is idle. */
const IDLE_CHECK_MS = 20;

/**
 * Runs `queue` in process through a real Consumer on `ledger` (no Redis: it
 * sweeps the ledger) until the queue is idle — no lane head due and
 * pending, nothing processing, nothing held — and answers every item it ran.
 * Items not due (a retry's backoff, a delay) stay pending and are not waited for, unless `scheduled`.
 */
export async function drainQueue<DB>(ledger: Ledger, options: DrainOptions<DB>): Promise<DrainedItem[]> {
  const consumer = new Consumer<DB>({
    pollIntervalMs: 20,
    redisDownPollMs: 20,
    ...options.consumer,
    ledger,
    queue: options.queue,
    handlers: options.handlers,
    ...(options.logger !== undefined ? { logger: options.logger } : {}),
  });
  const runs = new Map<string, Outcome[]>();
  consumer.on('outcome', (item, outcome) => runs.set(item.id, [...(runs.get(item.id) ?? []), outcome]));
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  await consumer.start();
  try {
    // Idle twice in a row, with a sweep of the consumer between: a claim in flight at the first
    // look is seen by the second.
    let idleSinceSweep: number | undefined;
    for (;;) {
      const idle =
        consumer.inFlight === 0 &&
        (await queueIdle(ledger, options.queue, options.scheduled ?? false)) &&
        consumer.inFlight === 0;
      if (!idle) idleSinceSweep = undefined;
      else if (idleSinceSweep === undefined) idleSinceSweep = consumer.counters.sweeps;
      else if (consumer.counters.sweeps > idleSinceSweep) break;
      if (Date.now() > deadline)
        throw new Error(`drain of ${options.queue}: not idle after ${options.timeoutMs ?? 30_000} ms`);
      await sleep(IDLE_CHECK_MS);
    }
  } finally {
    await consumer.stop({ drainTimeoutMs: 5_000 });
  }
  const out: DrainedItem[] = [];
  for (const [id, outcomes] of runs) {
    const item = await ledger.get(id);
    if (item === undefined) continue; // purged meanwhile
    out.push({
      id,
      type: item.type,
      state: item.state,
      result: item.result,
      error: item.lastError,
      failureClass: item.failureClass,
      attempts: item.attempt,
      runs: outcomes,
    });
  }
  return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * No due pending lane head (nor, with `scheduled`, any pending item not due yet) and nothing processing in `queue`.
 * Only zeros are compared, which a bounded count never reads as a floor: terminal counts play no part.
 */
async function queueIdle(ledger: Ledger, queue: string, scheduled: boolean): Promise<boolean> {
  const [stats] = await ledger.stats(queue);
  return (
    stats === undefined ||
    (exactCount(stats.counts.processing) === 0 &&
      stats.oldestDueAgeMs === 0 &&
      (!scheduled || exactCount(stats.scheduled) === 0))
  );
}
