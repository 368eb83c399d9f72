import { DEFAULT_CONCURRENCY, type LiveSettings } from '../consumer/options.js';
import type { QueueRow } from '../ledger/sql/queues/drain.js';
import { queueSettingsSchema } from '../ledger/validation.js';
import type { QueueConfig } from './config.js';

/**
 * Where a queue setting a worker runs with comes from: `config`, the worker's own (file, LANEWAKE_* or flag),
 * pinned there; `ledger`, the queue's row (`lanewake queue update`, Ledger.updateQueue); else `default`.
 */
export type SettingSource = 'config' | 'ledger' | 'default';

/** A setting's value and where it came from. */
export interface SourcedValue<T> {
  value: T;
  from: SettingSource;
}

/** The settings a worker runs a queue's consumers with now, as /readyz shows them. */
export interface EffectiveSettings {
  slots: SourcedValue<number>;
  maxProcessing: SourcedValue<number | null>;
  /** Fleet-wide, held by the ledger only (a config's value is written there at each consumer's start). */
  concurrencyLimit: SourcedValue<number | null>;
}

/** A ledger value as this build takes it: in the range updateQueue writes, else left unset (and the default). */
function inRange(schema: { safeParse: (v: unknown) => { success: boolean } }, v: number | null | undefined) {
  return v !== null && v !== undefined && schema.safeParse(v).success ? v : undefined;
}

/**
 * A queue's settings on this worker (docs/design/supervisor.md, "Queue settings in the ledger"): a value its config
 * entry sets (the queue's own, or its pattern's) is pinned and wins; else the ledger's row's; else the default.
 */
export function effectiveSettings(entry: QueueConfig, row: QueueRow | undefined): EffectiveSettings {
  const shape = queueSettingsSchema.shape;
  const slots = inRange(shape.slots, row?.slots);
  const cap = inRange(shape.maxProcessing, row?.maxProcessing);
  return {
    slots:
      entry.concurrency !== undefined
        ? { value: entry.concurrency, from: 'config' }
        : slots !== undefined
          ? { value: slots, from: 'ledger' }
          : { value: DEFAULT_CONCURRENCY, from: 'default' },
    maxProcessing:
      entry.maxProcessing !== undefined
        ? { value: entry.maxProcessing, from: 'config' }
        : cap !== undefined
          ? { value: cap, from: 'ledger' }
          : { value: null, from: 'default' },
    concurrencyLimit:
      row?.concurrencyLimit !== null && row?.concurrencyLimit !== undefined
        ? { value: row.concurrencyLimit, from: 'ledger' }
        : { value: null, from: 'default' },
  };
}

/** What a consumer takes of them. */
export function liveSettingsOf(s: EffectiveSettings): LiveSettings {
  return { concurrency: s.slots.value, maxProcessing: s.maxProcessing.value ?? undefined };
}

/**
 * Each served queue's incarnation as the worker last read it (QueueRow.incarnation), to tell a queue deleted and
 * made again, whose consumers are then replaced, from one that only changed settings. `gone`: its row was seen
 * missing (deleted), so the next row seen is a new incarnation whatever its number.
 */
export class Incarnations {
  private readonly seen = new Map<string, number | 'gone'>();

  /** Takes the row read now (undefined: none); true when the queue is a new incarnation of one served before. */
  changed(queue: string, row: QueueRow | undefined): boolean {
    const before = this.seen.get(queue);
    if (row === undefined) {
      if (before !== undefined) this.seen.set(queue, 'gone');
      return false;
    }
    this.seen.set(queue, row.incarnation);
    return before !== undefined && before !== row.incarnation;
  }

  /** The incarnation last read, if any. */
  of(queue: string): number | undefined {
    const v = this.seen.get(queue);
    return typeof v === 'number' ? v : undefined;
  }

  forget(queue: string): void {
    this.seen.delete(queue);
  }
}
