import type { Command } from 'commander';
import type { QueueRow } from '../../ledger/sql/queues/drain.js';
import type { QueueSettings } from '../../ledger/types.js';

/** The settings flags of `queue create` and `queue update`, as commander hands them over. */
export interface SettingsFlags {
  slots?: string;
  maxProcessing?: string;
  concurrencyLimit?: string;
  paused?: boolean;
}

/** Each flag's ValidationError field (Ledger.updateQueue names `settings.<field>`). */
export const SETTINGS_FIELDS: Readonly<Record<string, string>> = {
  queue: '<queue>',
  settings: 'a setting (--slots, --max-processing, --concurrency-limit, --paused)',
  'settings.slots': '--slots',
  'settings.maxProcessing': '--max-processing',
  'settings.concurrencyLimit': '--concurrency-limit',
  'settings.paused': '--paused',
};

export const SETTINGS_HELP = `
Settings (each held by the ledger for the whole fleet, read by every worker at each reconcile, so a
change takes effect within one --reconcile-interval-ms, without a restart; "none" clears one):
  --slots N              executor slots of each worker's consumer (1-1000; default 10)
  --max-processing N     fleet-wide cap on the queue's running items (1-1000000; default none)
  --concurrency-limit N  items of one concurrency key admitted at once (1-100000; default none)
  --paused, --no-paused  claim nothing / claim again (with --redis-url heard at once, as lanewake pause)
A worker whose own config sets slots or maxProcessing for the queue keeps its value (pinned);
its --print-config and /readyz say where each value came from.`;

/** Adds the settings flags to `cmd`. */
export function settingsOptions(cmd: Command): Command {
  return cmd
    .option('--slots <n>', 'executor slots of each worker\'s consumer, or "none"')
    .option('--max-processing <n>', 'fleet-wide cap on running items, or "none"')
    .option('--concurrency-limit <n>', 'items of one concurrency key admitted at once, or "none"')
    .option('--paused', 'pause the queue: its consumers claim nothing')
    .option('--no-paused', 'resume the queue');
}

/** `none` clears; a whole number is itself; anything else goes on as text, for validation to name its flag. */
function settingValue(text: string | undefined): number | string | null | undefined {
  if (text === undefined) return undefined;
  if (text === 'none') return null;
  return /^\d+$/.test(text.trim()) ? Number(text) : text;
}

/** The settings the flags give (only those given). */
export function settingsOf(flags: SettingsFlags): QueueSettings {
  const out: Record<string, unknown> = {
    slots: settingValue(flags.slots),
    maxProcessing: settingValue(flags.maxProcessing),
    concurrencyLimit: settingValue(flags.concurrencyLimit),
    paused: flags.paused,
  };
  // Unvalidated here on purpose: Ledger.updateQueue refuses a bad value naming its field, writing nothing.
  return Object.fromEntries(Object.entries(out).filter(([, v]) => v !== undefined)) as QueueSettings;
}

/** A queue's settings as `queue list` prints them: only those set. */
export function settingsText(r: QueueRow): string {
  const parts = [
    r.slots !== null && `slots=${r.slots}`,
    r.maxProcessing !== null && `max-processing=${r.maxProcessing}`,
    r.concurrencyLimit !== null && `concurrency-limit=${r.concurrencyLimit}`,
  ];
  return parts.filter(Boolean).join(' ');
}
