/**
 * Where a worker setting comes from (LANEWAKE_* variables, a --config file) and how
 * the layers merge before config.ts's schema validates them once.
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { ValidationError } from '../errors.js';
import { type WorkerConfig, type WorkerConfigInput, workerConfigSchema } from './config.js';

type Source = 'string' | 'int' | 'queues' | 'admin';

/** LANEWAKE_* environment variables that map onto top-level config fields. */
const ENV_FIELDS: Record<string, { field: keyof WorkerConfigInput; kind: Source }> = {
  LANEWAKE_DATABASE_URL: { field: 'databaseUrl', kind: 'string' },
  LANEWAKE_REDIS_URL: { field: 'redisUrl', kind: 'string' },
  LANEWAKE_REDIS_KEY_PREFIX: { field: 'redisKeyPrefix', kind: 'string' },
  LANEWAKE_TABLE_PREFIX: { field: 'tablePrefix', kind: 'string' },
  LANEWAKE_POOL_SIZE: { field: 'poolSize', kind: 'int' },
  LANEWAKE_HANDLERS: { field: 'handlers', kind: 'string' },
  LANEWAKE_QUEUES: { field: 'queues', kind: 'queues' },
  LANEWAKE_DRAIN_TIMEOUT_MS: { field: 'drainTimeoutMs', kind: 'int' },
  LANEWAKE_RECONCILE_INTERVAL_MS: { field: 'reconcileIntervalMs', kind: 'int' },
  LANEWAKE_RETENTION_MS: { field: 'retentionMs', kind: 'int' },
  LANEWAKE_ADMIN: { field: 'admin', kind: 'admin' },
  LANEWAKE_ADMIN_TOKEN: { field: 'adminToken', kind: 'string' },
  LANEWAKE_DEPLOYMENT: { field: 'deployment', kind: 'string' },
  LANEWAKE_OWNERSHIP_CHECK_MS: { field: 'ownershipCheckMs', kind: 'int' },
};

/** Names that were renamed: using one is an error naming its replacement, never silently ignored. */
export const RENAMED_ENV: Readonly<Record<string, string>> = { LANEWAKE_KEY_PREFIX: 'LANEWAKE_REDIS_KEY_PREFIX' };
const RENAMED_FIELDS: Readonly<Record<string, string>> = { keyPrefix: 'redisKeyPrefix' };

/** Where a required setting can be given, for the message when none is. */
const HOW_TO_SET: Readonly<Record<string, string>> = {
  databaseUrl: 'set --database-url <url> or LANEWAKE_DATABASE_URL, or `databaseUrl:` in the --config file',
  handlers: 'set --handlers <module> or LANEWAKE_HANDLERS, or `handlers:` in the --config file',
  queues: 'name at least one queue: --queues <list> or LANEWAKE_QUEUES, or `queues:` in the --config file',
  deployment: 'set --deployment <name> or LANEWAKE_DEPLOYMENT, or `deployment:` in the --config file',
};

/** ValidationError naming each renamed environment variable present in `env`. */
export function renamedEnvError(env: NodeJS.ProcessEnv): ValidationError | undefined {
  const used = Object.keys(RENAMED_ENV).filter((name) => env[name] !== undefined);
  if (used.length === 0) return undefined;
  return new ValidationError(
    used.map((name) => ({ field: name, message: `was renamed: set ${RENAMED_ENV[name]} instead` })),
    'environment',
  );
}

/**
 * `queue[:concurrency[:class+class]]` items separated by commas, e.g.
 * `billing:16,mail,reports::bulk`. Only what is written is set, so a file's
 * other settings for the queue stay. Malformed numbers are passed through
 * as-is so validation names the field.
 */
export function parseQueueList(text: string): unknown[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => {
      const [name, concurrency, classes] = s.split(':');
      return {
        name,
        ...(concurrency !== undefined && concurrency !== '' ? { concurrency: numberOrText(concurrency) } : {}),
        ...(classes !== undefined && classes !== '' ? { classes: classes.split('+') } : {}),
      };
    });
}

/** `host:port`, `:port`, `port` or `off`. */
export function parseAdminAddress(text: string): unknown {
  if (text === 'off' || text === 'false') return false;
  const at = text.lastIndexOf(':');
  const host = at > 0 ? text.slice(0, at) : '127.0.0.1';
  return { host, port: numberOrText(at >= 0 ? text.slice(at + 1) : text) };
}

function numberOrText(s: string): number | string {
  return /^-?\d+$/.test(s) ? Number(s) : s;
}

export function configFromEnv(env: NodeJS.ProcessEnv): Partial<Record<keyof WorkerConfigInput, unknown>> {
  const renamed = renamedEnvError(env);
  if (renamed) throw renamed;
  const out: Partial<Record<keyof WorkerConfigInput, unknown>> = {};
  for (const [name, { field, kind }] of Object.entries(ENV_FIELDS)) {
    const v = env[name];
    if (v === undefined || v === '') continue;
    out[field] =
      kind === 'int'
        ? numberOrText(v)
        : kind === 'queues'
          ? parseQueueList(v)
          : kind === 'admin'
            ? parseAdminAddress(v)
            : v;
  }
  return out;
}

export async function configFromFile(path: string): Promise<Record<string, unknown>> {
  const text = await readFile(path, 'utf8');
  const parsed: unknown = /\.ya?ml$/i.test(path) ? parseYaml(text) : JSON.parse(text);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ValidationError([{ field: 'config', message: `${path} must hold an object` }], 'worker config');
  }
  return parsed as Record<string, unknown>;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A later layer's queue list refines the earlier one by name: a queue it
 * names has the fields it sets replaced and every other field kept; a queue
 * it does not name stays as it was; a new name is added (and starts with the
 * defaults). A name listed twice in one layer is kept twice, for validation
 * to refuse.
 */
export function refineQueues(earlier: unknown, later: unknown): unknown {
  if (earlier === undefined) return later;
  // A malformed list on either side is passed on for validation to name, never merged around.
  if (!Array.isArray(earlier)) return earlier;
  if (!Array.isArray(later)) return later;
  const out: unknown[] = [...earlier];
  const refined = new Set<number>();
  for (const entry of later) {
    const at = isRecord(entry)
      ? out.findIndex((q, i) => i < earlier.length && !refined.has(i) && isRecord(q) && q.name === entry.name)
      : -1;
    if (at < 0) {
      out.push(entry);
      continue;
    }
    refined.add(at);
    const defined = Object.fromEntries(
      Object.entries(entry as Record<string, unknown>).filter(([, v]) => v !== undefined),
    );
    out[at] = { ...(out[at] as Record<string, unknown>), ...defined };
  }
  return out;
}

/**
 * File < env < flags, validated once when merged, so an error names the field
 * whatever its source. Top-level fields of a later layer replace earlier
 * ones; `queues` is refined by name (see refineQueues).
 */
export function mergeConfigLayers(layers: readonly Record<string, unknown>[]): Record<string, unknown> {
  const merged: Record<string, unknown> = {};
  for (const layer of layers) {
    for (const [k, v] of Object.entries(layer)) {
      if (v === undefined) continue;
      merged[k] = k === 'queues' ? refineQueues(merged.queues, v) : v;
    }
  }
  return merged;
}

export function resolveWorkerConfig(layers: readonly Record<string, unknown>[]): WorkerConfig {
  const merged = mergeConfigLayers(layers);
  const parsed = workerConfigSchema.safeParse(merged);
  if (parsed.success) return parsed.data;
  const error = ValidationError.fromZod(parsed.error, 'worker config');
  return throwExplained(error, merged);
}

/** Says what to do for a required setting no layer gave, and for a renamed one. */
function throwExplained(error: ValidationError, merged: Record<string, unknown>): never {
  const issues = error.issues.map((issue) => {
    const renamed = RENAMED_FIELDS[issue.field];
    if (renamed !== undefined) return { field: issue.field, message: `was renamed: use ${renamed}` };
    const how = HOW_TO_SET[issue.field];
    const value = merged[issue.field];
    const missing = value === undefined || (Array.isArray(value) && value.length === 0);
    return how !== undefined && missing ? { field: issue.field, message: `missing: ${how}` } : issue;
  });
  throw new ValidationError(issues, 'worker config');
}

/** The queue settings the ledger can also give (live-settings.ts), whose source --print-config shows. */
const LEDGER_SETTINGS = ['concurrency', 'maxProcessing', 'concurrencyLimit'] as const;

/**
 * Where each queue's ledger-settable values come from, for --print-config: `pinned by <layer>` when a layer
 * (`file`, `env`, `flags`; the last one that sets it) gives it, else what the worker reads from the queue's row in
 * the ledger at each reconcile (`lanewake queue update`), and the default without one.
 */
export function settingSources(
  layers: readonly { name: string; values: Record<string, unknown> }[],
  config: WorkerConfig,
): Record<string, Record<string, string>> {
  const unset: Record<(typeof LEDGER_SETTINGS)[number], string> = {
    concurrency: 'the ledger (queue update --slots), read live; else 10',
    maxProcessing: 'the ledger (queue update --max-processing), read live; else none',
    concurrencyLimit: 'the ledger (queue update --concurrency-limit), fleet-wide; else none',
  };
  const out: Record<string, Record<string, string>> = {};
  for (const q of config.queues) {
    const fields: Record<string, string> = {};
    for (const field of LEDGER_SETTINGS) {
      const by = layers.findLast(({ values }) =>
        Array.isArray(values.queues)
          ? values.queues.some((e) => isRecord(e) && e.name === q.name && e[field] !== undefined)
          : false,
      );
      fields[field] =
        by === undefined
          ? unset[field]
          : field === 'concurrencyLimit'
            ? `${by.name}: written to the ledger at each consumer's start, fleet-wide`
            : `pinned by ${by.name}`;
    }
    out[q.name] = fields;
  }
  return out;
}
