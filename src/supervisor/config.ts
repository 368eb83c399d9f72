import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { ValidationError } from '../errors.js';
import { backoffSchema } from '../ledger/backoff.js';
import { QUEUE_CLASSES } from '../ledger/types.js';
import { queueName } from '../ledger/validation.js';

const ms = (max = 86_400_000) => z.number().int().min(0).max(max);

export const queueConfigSchema = z
  .object({
    name: queueName,
    concurrency: z.number().int().min(1).max(1000).default(10),
    classes: z.array(z.enum(QUEUE_CLASSES)).min(1).optional(),
    leaseMs: z.number().int().min(100).max(3_600_000).optional(),
    /** Handler deadline for the queue; 0 = none. */
    deadlineMs: ms().optional(),
    pollIntervalMs: z.number().int().min(10).max(3_600_000).optional(),
    backoff: backoffSchema.optional(),
    /** Most items claimed ahead of free slots (the consumer's prefetch buffer; 0 = off). */
    prefetch: z.number().int().min(0).max(10_000).optional(),
        /** Fleet-wide cap on this queue's items in `processing` (from the ledger). */
    maxProcessing: z.number().int().min(1).max(1_000_000).optional(),
    /** Claims are fenced by this deployment's ownership epoch (`lanewake activate`). */
    ownership: z.boolean().default(false),
  })
  .strict();

export const workerConfigSchema = z
  .object({
    databaseUrl: z.string().min(1),
    redisUrl: z.string().min(1).optional(),
    tablePrefix: z.string().default('lw_'),
    poolSize: z.number().int().min(1).max(512).default(10),
    keyPrefix: z.string().min(1).max(64).default('lw:'),
    /** An ES module exporting `handlers` (or a default export): { [queue]: { [type]: handler } }. */
    handlers: z.string().min(1),
    queues: z.array(queueConfigSchema).min(1, 'name at least one queue'),
    drainTimeoutMs: ms(3_600_000).default(30_000),
    reconcileIntervalMs: z.number().int().min(100).max(3_600_000).default(10_000),
    /** Terminal items older than this are purged by the reconciler; 0 = keep forever. */
    retentionMs: ms(3650 * 86_400_000).default(7 * 86_400_000),
    admin: z
      .union([
        z.literal(false),
        z.object({ host: z.string().min(1).default('127.0.0.1'), port: z.number().int().min(0).max(65_535).default(9464) }).strict(),
      ])
      .default({ host: '127.0.0.1', port: 9464 }),
    /** This process's deployment name, for ownership epochs. */
    deployment: z.string().min(1).max(128).optional(),
    ownershipCheckMs: z.number().int().min(100).max(600_000).default(5_000),
  })
  .strict()
  .superRefine((c, ctx) => {
    const seen = new Set<string>();
    c.queues.forEach((q, i) => {
      if (seen.has(q.name)) ctx.addIssue({ code: 'custom', path: ['queues', i, 'name'], message: `queue ${q.name} is listed twice` });
      seen.add(q.name);
      if (q.ownership && c.deployment === undefined) {
        ctx.addIssue({ code: 'custom', path: ['deployment'], message: `queue ${q.name} uses ownership epochs: name this deployment` });
      }
    });
  });

export type WorkerConfig = z.output<typeof workerConfigSchema>;
export type WorkerConfigInput = z.input<typeof workerConfigSchema>;
export type QueueConfig = z.output<typeof queueConfigSchema>;

/** LANEWAKE_* environment variables that map onto top-level config fields. */
const ENV_FIELDS: Record<string, { field: keyof WorkerConfigInput; kind: 'string' | 'int' | 'queues' | 'admin' }> = {
  LANEWAKE_DATABASE_URL: { field: 'databaseUrl', kind: 'string' },
  LANEWAKE_REDIS_URL: { field: 'redisUrl', kind: 'string' },
  LANEWAKE_TABLE_PREFIX: { field: 'tablePrefix', kind: 'string' },
  LANEWAKE_POOL_SIZE: { field: 'poolSize', kind: 'int' },
  LANEWAKE_KEY_PREFIX: { field: 'keyPrefix', kind: 'string' },
  LANEWAKE_HANDLERS: { field: 'handlers', kind: 'string' },
  LANEWAKE_QUEUES: { field: 'queues', kind: 'queues' },
  LANEWAKE_DRAIN_TIMEOUT_MS: { field: 'drainTimeoutMs', kind: 'int' },
  LANEWAKE_RECONCILE_INTERVAL_MS: { field: 'reconcileIntervalMs', kind: 'int' },
  LANEWAKE_RETENTION_MS: { field: 'retentionMs', kind: 'int' },
  LANEWAKE_ADMIN: { field: 'admin', kind: 'admin' },
  LANEWAKE_DEPLOYMENT: { field: 'deployment', kind: 'string' },
  LANEWAKE_OWNERSHIP_CHECK_MS: { field: 'ownershipCheckMs', kind: 'int' },
};

/**
 * `queue[:concurrency]` items separated by commas, e.g. `billing:16,mail`.
 * Malformed numbers are passed through as-is so validation names the field.
 */
export function parseQueueList(text: string): unknown[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((s) => {
      const [name, concurrency] = s.split(':');
      return concurrency === undefined ? { name } : { name, concurrency: numberOrText(concurrency) };
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
  const out: Partial<Record<keyof WorkerConfigInput, unknown>> = {};
  for (const [name, { field, kind }] of Object.entries(ENV_FIELDS)) {
    const v = env[name];
    if (v === undefined || v === '') continue;
    out[field] = kind === 'int' ? numberOrText(v) : kind === 'queues' ? parseQueueList(v) : kind === 'admin' ? parseAdminAddress(v) : v;
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

/** File < env < flags; the merged result is validated once, so an error names the field whatever its source. */
export function resolveWorkerConfig(layers: readonly Record<string, unknown>[]): WorkerConfig {
  const merged: Record<string, unknown> = {};
  for (const layer of layers) for (const [k, v] of Object.entries(layer)) if (v !== undefined) merged[k] = v;
  const parsed = workerConfigSchema.safeParse(merged);
  if (!parsed.success) throw ValidationError.fromZod(parsed.error, 'worker config');
  return parsed.data;
}
