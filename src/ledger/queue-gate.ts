import { QueueDrainingError } from '../errors.js';
import type { Executor, LedgerDb } from './connection.js';
import { drainFlags, registerQueues } from './sql/queues/drain.js';
import type { LedgerTables } from './tables.js';

/** How long a process trusts what it read of its queues' drain-only flags (ms). */
export const DRAIN_CACHE_MS = 1_000;
/** How long after a queue became drain-only its delete waits: every producer has read the flag by then (ms). */
export const DRAIN_SETTLE_MS = 5 * DRAIN_CACHE_MS;
/** A queue not enqueued to for this long is forgotten (ms), so the read stays the size of the queues in use. */
const FORGET_MS = 60_000;

/**
 * What an enqueue checks of its queues (schema 16): that none is drain-only,
 * read at most once per DRAIN_CACHE_MS per process for the queues it enqueues
 * to, so an enqueue costs no extra round trip; and, the first time the
 * process sees a queue without a row, that row, so that a worker serving a
 * pattern finds the queue at its next reconcile. A ledger below schema 16 has
 * no flag: nothing is refused.
 */
export class QueueGate {
  private readonly draining = new Map<string, boolean>();
  private readonly usedAtMs = new Map<string, number>();
  private readAtMs = Number.NEGATIVE_INFINITY;
  private reading: Promise<void> | undefined;

  constructor(
    private readonly db: LedgerDb,
    private readonly t: LedgerTables,
  ) {}

  /**
   * Throws QueueDrainingError for the first item whose queue is drain-only; `batch` names its index. `within` is
   * the caller's transaction an enqueue joins: when the flags are stale it reads them itself, since a read on the
   * pool could wait for a connection that callers' open transactions hold, the very ones waiting for it.
   */
  async check(items: readonly { queue: string }[], batch: boolean, within?: Executor): Promise<void> {
    const queues = [...new Set(items.map((i) => i.queue))];
    const now = Date.now();
    for (const q of queues) this.usedAtMs.set(q, now);
    await this.fresh(queues, within);
    items.forEach((item, i) => {
      if (this.draining.get(item.queue) === true)
        throw new QueueDrainingError(item.queue, 'drain_only', batch ? i : undefined);
    });
  }

  private async fresh(queues: readonly string[], within: Executor | undefined): Promise<void> {
    for (;;) {
      const stale = Date.now() - this.readAtMs >= DRAIN_CACHE_MS;
      if (!stale && queues.every((q) => this.draining.has(q))) return;
      if (within !== undefined) return this.read(queues, within);
      if (this.reading) {
        await this.reading;
        continue;
      }
      this.reading = this.read(queues, undefined).finally(() => (this.reading = undefined));
      await this.reading;
    }
  }

  /**
   * Reads the flags of the queues in use, on the pool or in a caller's transaction (whose snapshot is as old as
   * its first read, a bound the caller sets). A queue without a row gets one; beside a caller's transaction it is
   * written on the pool and not waited for: it is a hint for workers' patterns, not part of the caller's work,
   * and one not written is found missing again at a later read.
   */
  private async read(wanted: readonly string[], within: Executor | undefined): Promise<void> {
    const startedAtMs = Date.now();
    for (const [q, at] of this.usedAtMs) {
      if (startedAtMs - at <= FORGET_MS) continue;
      this.usedAtMs.delete(q);
      this.draining.delete(q);
    }
    const queues = [...new Set([...this.usedAtMs.keys(), ...wanted])];
    const flags = await drainFlags(within ?? this.db, this.t, queues);
    // A row gone (its queue deleted) is written again; below schema 16 only a queue new to this process's is.
    const unseen = queues.filter((q) => (flags ? !flags.has(q) : !this.draining.has(q)));
    if (unseen.length > 0 && within !== undefined) void registerQueues(this.db, this.t, unseen).catch(() => undefined);
    else if (unseen.length > 0) await registerQueues(this.db, this.t, unseen);
    for (const q of queues) this.draining.set(q, flags?.get(q) === true);
    this.readAtMs = startedAtMs;
  }
}
