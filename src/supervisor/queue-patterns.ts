import type { QueueRow } from '../ledger/sql/queues/drain.js';
import type { QueueConfig } from './config.js';
import type { EffectiveSettings } from './live-settings.js';

/** Why a worker serves a queue, as /readyz says it. */
export interface ServedQueue {
  queue: string;
  /** `pinned`: named in the worker's config; `matched`: a queue of the ledger its pattern matches. */
  why: 'pinned' | 'matched';
  /** The config entry's pattern, for a matched queue. */
  pattern?: string;
  /** The ledger holds it drain-only: its consumers finish what it holds, no enqueue is taken. */
  drainOnly: boolean;
  /** Its incarnation as last read (QueueRow.incarnation); absent while the ledger holds no row of it. */
  incarnation?: number;
  /** The settings its consumers run with, and where each came from (live-settings.ts). */
  settings?: EffectiveSettings;
}

/** Whether a config entry's name is a pattern: it holds `*`, which no queue's name does. */
export function isPattern(name: string): boolean {
  return name.includes('*');
}

/** `*` matches any run of characters (none included); everything else matches itself. */
export function patternMatcher(pattern: string): (queue: string) => boolean {
  const escaped = pattern.split('*').map((part) => part.replace(/[.\\^$+?()[\]{}|-]/g, '\\$&'));
  const re = new RegExp(`^${escaped.join('.*')}$`);
  return (queue) => re.test(queue);
}

/** What a reconcile decided: the queues to start consumers for (with the entry giving their settings), and to stop. */
export interface PatternChanges {
  start: { queue: string; entry: number; config: QueueConfig }[];
  stop: string[];
}

/**
 * The worker's queue patterns (`--queues 'tenant-*:8'`) and the queues they
 * match now. A queue exists when the ledger holds its row (lw_queues: written
 * at its first enqueue or setting). A queue named in the config is pinned: it
 * takes that entry's settings and no pattern's. Of several patterns, the
 * first in the config that matches gives its settings. A queue whose row goes
 * (`lanewake queue delete`) is let go.
 */
export class QueuePatterns {
  private readonly entries: { index: number; config: QueueConfig; matches: (queue: string) => boolean }[];
  private readonly pinned: Set<string>;
  /** Per matched queue: its entry's index and whether it is drain-only. */
  private readonly matched = new Map<string, { entry: number; drainOnly: boolean }>();
  private readonly pinnedDrainOnly = new Set<string>();

  constructor(queues: readonly QueueConfig[]) {
    this.pinned = new Set(queues.filter((q) => !isPattern(q.name)).map((q) => q.name));
    this.entries = queues.flatMap((config, index) =>
      isPattern(config.name) ? [{ index, config, matches: patternMatcher(config.name) }] : [],
    );
  }

  get any(): boolean {
    return this.entries.length > 0;
  }

  /** The queues matched now, in name order. */
  get queues(): string[] {
    return [...this.matched.keys()].sort();
  }

  /** Takes the ledger's queues as read now: what to start and what to stop. */
  reconcile(rows: readonly QueueRow[]): PatternChanges {
    const changes: PatternChanges = { start: [], stop: [] };
    const present = new Set<string>();
    this.pinnedDrainOnly.clear();
    for (const row of rows) {
      if (this.pinned.has(row.queue)) {
        if (row.drainOnly) this.pinnedDrainOnly.add(row.queue);
        continue;
      }
      const entry = this.entries.find((e) => e.matches(row.queue));
      if (!entry) continue;
      present.add(row.queue);
      const known = this.matched.get(row.queue);
      this.matched.set(row.queue, { entry: entry.index, drainOnly: row.drainOnly });
      if (!known) changes.start.push({ queue: row.queue, entry: entry.index, config: entry.config });
    }
    for (const queue of [...this.matched.keys()]) {
      if (present.has(queue)) continue;
      this.matched.delete(queue);
      changes.stop.push(queue);
    }
    return changes;
  }

  /**
   * /readyz's `queues` check: how many are served, or that none is: then not ready, as it serves no queue a
   * balancer or a rollout could be waiting on (it still reads the ledger, and serves a match at its next pass).
   */
  check(served: readonly ServedQueue[]): { ok: boolean; detail: string } {
    if (served.length > 0) return { ok: true, detail: `serving ${served.length} queue(s)` };
    const patterns = this.entries.map((e) => e.config.name).join(', ');
    return { ok: false, detail: `serving no queue: none in the ledger matches ${patterns}` };
  }

  /** The config entry (its index) giving a matched queue's settings. */
  entryOf(queue: string): number | undefined {
    return this.matched.get(queue)?.entry;
  }

  /** Every queue served, pinned ones first (as configured), then matched ones by name. */
  served(pinnedServed: readonly string[]): ServedQueue[] {
    const pinned = pinnedServed.map(
      (queue): ServedQueue => ({ queue, why: 'pinned', drainOnly: this.pinnedDrainOnly.has(queue) }),
    );
    const matched = this.queues.map((queue): ServedQueue => {
      const m = this.matched.get(queue);
      const pattern = this.entries.find((e) => e.index === m?.entry)?.config.name;
      return { queue, why: 'matched', ...(pattern !== undefined ? { pattern } : {}), drainOnly: m?.drainOnly ?? false };
    });
    return [...pinned, ...matched];
  }
}
