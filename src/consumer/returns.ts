/** Returns: claimed items going back to the ledger unstarted (released without spending an attempt). */
import type { Logger } from '../log.js';
import type { ConsumerCounters } from './counters.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { Prefetched } from './prefetch-buffer.js';

/**
 * Claimed items that will not start here go back to the ledger unstarted
 * (docs/design/consumer.md): released without spending an attempt, keeping their
 * place in line. Those returned while the consumer stops are tracked, so
 * the stop can wait for them.
 */
export class Returns {
  private readonly late = new Set<Promise<void>>();

  constructor(
    private readonly ledger: Pick<ConsumerLedger, 'release'>,
    private readonly counters: ConsumerCounters,
    private readonly log: Logger,
    /** Called for each item before it goes (e.g. to forget a cancel hint), and after all went. */
    private readonly hooks: { leaving: (id: string) => void; gone: () => void },
  ) {}

  async release(items: readonly Prefetched[], reason: string): Promise<void> {
    if (items.length === 0) return;
    this.counters.prefetchReleased += items.length;
    for (const p of items) this.hooks.leaving(p.item.id);
    await Promise.allSettled(
      items.map((p) =>
        this.ledger.release(p.item, { reason }).catch((error: unknown) => {
          this.counters.errors++;
          this.log.warn(
            { id: p.item.id, err: (error as Error).message },
            'could not release a prefetched item; its lease will expire',
          );
        }),
      ),
    );
    this.hooks.gone();
  }

  /** A return while stopping: the stop waits for it (settled()). */
  releaseLate(items: readonly Prefetched[], reason: string): void {
    const p = this.release(items, reason);
    this.late.add(p);
    void p.finally(() => this.late.delete(p));
  }

  async settled(): Promise<void> {
    await Promise.allSettled([...this.late]);
  }
}
