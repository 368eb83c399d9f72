import { z } from 'zod';
import { consumerSettingsSchema, type ConsumerSettingsInput } from '../consumer/options.js';
import { poolsSchema } from '../consumer/pools.js';
import { ledgerConfigSchema } from '../ledger/config.js';
import { workerName } from '../ledger/validation.js';
import { scheduleSchema } from '../ledger/schedules.js';
import { DEFAULT_SCHEDULE_CHECK_MS } from '../schedules/firer.js';
import { DEFAULT_KEY_PREFIX } from '../wake/keys.js';
import { isClusterUrl, parseClusterUrl } from '../wake/redis.js';

/** The prefix of every Redis key; worker and CLI check it alike. */
export const redisKeyPrefixSchema = z
  .string()
  .regex(/^[A-Za-z0-9_.:-]{1,64}$/, 'must be 1-64 chars of [A-Za-z0-9_.:-]')
  .describe('Prefix of every Redis key (1-64 chars of [A-Za-z0-9_.:-]), so several deployments can share one Redis.');

type Shape = Record<string, z.ZodType>;
/** Each field optional and without its default: what a queue entry does not set, the consumer defaults. */
type LeftUnset<S extends Shape> = {
  [K in keyof S]: S[K] extends z.ZodDefault<infer T>
    ? z.ZodOptional<T>
    : S[K] extends z.ZodOptional
      ? S[K]
      : z.ZodOptional<S[K]>;
};

/**
 * The consumer's fields, each optional and without its default, so a queue
 * entry holds only what it set (refineQueues, --print-config) and the
 * consumer's own defaults apply to the rest. The consumer's default stays in
 * the field's documentation (docs/configuration.md).
 */
function leftUnset<S extends Shape>(shape: S): LeftUnset<S> {
  const fields = Object.entries(shape).map(([key, field]) => {
    if (!(field instanceof z.ZodDefault)) return [key, field instanceof z.ZodOptional ? field : field.optional()];
    return [
      key,
      (field.unwrap() as z.ZodType)
        .optional()
        .meta({ description: field.description, default: field.def.defaultValue }),
    ];
  });
  return Object.fromEntries(fields) as LeftUnset<S>;
}

const consumerField = consumerSettingsSchema.shape;

/**
 * One queue of the worker: its name, the consumer settings a queue entry may
 * set (the consumer's own fields and limits), and ownership.
 */
export const queueConfigSchema = z
  .object({
    name: z
      .string()
      .regex(/^[a-z0-9._*-]{1,64}$/, 'must be 1-64 chars of [a-z0-9._-], or a pattern with *')
      .describe(
        'The queue (1-64 chars of [a-z0-9._-]), or a pattern with `*` (`tenant-*`): every queue of the ledger it ' +
          'matches, found within one `reconcileIntervalMs` of its first item or setting, and let go once deleted. ' +
          "A queue named in full takes its own entry's settings; else the first pattern that matches gives them.",
      ),
    // Left unset unless given: a value set here is pinned, else the queue's row in the ledger gives it (slots, the
    // fleet cap; `lanewake queue update`), else the consumer's default (src/supervisor/live-settings.ts).
    ...leftUnset(
      consumerSettingsSchema.pick({
        prefetch: true,
        classes: true,
        preferClasses: true,
        leaseMs: true,
        deadlineMs: true,
        abortGraceMs: true,
        pollIntervalMs: true,
        backoff: true,
        concurrencyLimit: true,
        fairness: true,
        unknownType: true,
        unknownTypeReleaseMs: true,
        unknownTypeGraceMs: true,
        staleOnly: true,
        staleOnlyGate: true,
      }).shape,
    ),
    concurrency: consumerField.concurrency
      .unwrap()
      .optional()
      .describe(
        'Executor slots: how many handlers run at once. Set here (or by --queues name:N), it is pinned on this ' +
          "worker; else the queue's slots in the ledger (`lanewake queue update --slots`), read live, else 10.",
      ),
    maxProcessing: consumerField.maxProcessing.describe(
      "Fleet-wide cap on the queue's `processing` items, held in each claim's own transaction. Set here, it is " +
        "pinned on this worker; else the queue's in the ledger (`lanewake queue update --max-processing`), read " +
        'live. Default: none.',
    ),
    // A worker's list may not be empty (the consumer takes [] as every type).
    types: consumerField.types
      .unwrap()
      .min(1)
      .optional()
      .describe(
        'Only these types are claimed here (at least one). Default: every type of the ' +
          'queue, so an item whose type has no handler here ends per `unknownType`.',
      ),
    pools: poolsSchema.optional(),
    ownership: z
      .boolean()
      .default(false)
      .describe(
        "Claims are fenced by this deployment's ownership epoch (`lanewake " +
          'activate`); needs `deployment`. A standby queue claims nothing.',
      ),
  })
  .strict();

/** What an invalid admin address is told: the forms each source accepts. */
const ADMIN_FORMS =
  'must be host:port, :port, a port, or off (--admin, LANEWAKE_ADMIN), ' +
  'or in a config file `admin: { host, port }` or `admin: false`';

export const workerConfigSchema = z
  .object({
    databaseUrl: z
      .string()
      .min(1)
      .describe('The ledger: mysql://user:pass@host:port/database (MariaDB 10.11, MySQL 8 or TiDB).'),
    redisUrl: z
      .string()
      .min(1)
      .superRefine((u, ctx) => {
        const problem = clusterUrlProblem(u);
        if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
      })
      .optional()
      .describe(
        'Redis for wake-ups, timers and control messages. Default: none; ' +
          'consumers then sweep the ledger every `pollIntervalMs`.',
      ),
    tablePrefix: z
      .string()
      .default('lw_')
      .describe('Prefix of every ledger table, checked by the ledger (see Ledger config `tablePrefix`).'),
    poolSize: ledgerConfigSchema.shape.poolSize,
    redisKeyPrefix: redisKeyPrefixSchema.default(DEFAULT_KEY_PREFIX),
    handlers: z
      .string()
      .min(1)
      .describe(
        'An ES module (path from the working directory) exporting `handlers` ' +
          '(or a default export): { [queue]: { [type]: handler } }.',
      ),
    queues: z
      .array(queueConfigSchema)
      .min(1, 'name at least one queue')
      .describe('The queues this worker runs, one consumer each (see Queue config).'),
    drainTimeoutMs: consumerField.drainTimeoutMs.describe(
      'At SIGTERM/SIGINT: how long (ms) running handlers may take to finish before they are aborted (reason shutdown).',
    ),
    reconcileIntervalMs: z
      .number()
      .int()
      .min(100)
      .max(3_600_000)
      .default(10_000)
      .describe(
        'Reconciler interval (ms): expired leases back to pending, ' +
          'dependency probes, retention purge, stream trimming, gauges.',
      ),
    retentionMs: z
      .number()
      .int()
      .min(0)
      .max(3650 * 86_400_000)
      .default(7 * 86_400_000)
      .describe('Terminal items older than this (ms) are purged by the reconciler; 0 = keep forever.'),
    admin: z
      .union(
        [
          z.literal(false),
          z
            .object({
              host: z.string().min(1).default('127.0.0.1').describe('Address the admin HTTP server binds.'),
              port: z
                .number()
                .int()
                .min(0)
                .max(65_535)
                .default(9464)
                .describe('Port of the admin HTTP server (0 = any free port).'),
            })
            .strict(),
        ],
        { error: ADMIN_FORMS },
      )
      .default({ host: '127.0.0.1', port: 9464 })
      .describe('The admin HTTP server (dashboard, /metrics, /livez, /readyz, /version, /api/*), or false for none.'),
    adminToken: z
      .string()
      .min(16, 'must be at least 16 characters')
      .max(512)
      .optional()
      .describe(
        "The token the dashboard's actions (replay, cancel, pause, purge) must send " +
          '(x-lanewake-admin-token). Default: none, the dashboard is read-only.',
      ),
    showPayloads: z
      .boolean()
      .default(false)
      .describe("Show items' payloads in the dashboard (/api/items/<id>). Default: hidden."),
    deployment: workerName
      .optional()
      .describe(
        "This process's deployment name, for ownership epochs. Default: none (required by a queue with `ownership`).",
      ),
    ownershipCheckMs: z
      .number()
      .int()
      .min(100)
      .max(600_000)
      .default(5_000)
      .describe(
        "How often (ms) the worker reads its queues' ownership epochs " +
          'from the ledger (a control message also tells it at once).',
      ),
    schedules: z
      .array(scheduleSchema)
      .max(10_000)
      .optional()
      .describe(
        "Recurring schedules this file declares (see Schedule config), made the ledger's at " +
          'start: each is made or replaced, and the ones an earlier file declared that this one ' +
          'does not are removed; schedules made through the API stay. Default: unset, the ' +
          "ledger's schedules are left as they are (`[]` removes every file-declared one).",
      ),
    scheduleCheckMs: z
      .number()
      .int()
      .min(10)
      .max(60_000)
      .default(DEFAULT_SCHEDULE_CHECK_MS)
      .describe(
        'The longest (ms) the worker goes without looking for due schedules in the ledger; it also looks at ' +
          'each next fire time. How late a fire can be when its schedule was made or resumed elsewhere.',
      ),
  })
  .strict()
  .superRefine((c, ctx) => {
    const seen = new Set<string>();
    c.queues.forEach((q, i) => {
      if (seen.has(q.name))
        ctx.addIssue({ code: 'custom', path: ['queues', i, 'name'], message: `queue ${q.name} is listed twice` });
      seen.add(q.name);
      if (q.ownership && q.name.includes('*'))
        ctx.addIssue({
          code: 'custom',
          path: ['queues', i, 'ownership'],
          message: `pattern ${q.name}: ownership epochs are for a queue named in full`,
        });
      if (q.ownership && c.deployment === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['deployment'],
          message: `queue ${q.name} uses ownership epochs: name this deployment`,
        });
      }
    });
    const names = new Set<string>();
    c.schedules?.forEach((s, i) => {
      if (names.has(s.name))
        ctx.addIssue({ code: 'custom', path: ['schedules', i, 'name'], message: `schedule ${s.name} is listed twice` });
      names.add(s.name);
    });
  });

export type WorkerConfig = z.output<typeof workerConfigSchema>;
export type WorkerConfigInput = z.input<typeof workerConfigSchema>;
export type QueueConfig = z.output<typeof queueConfigSchema>;

/** The consumer settings of one configured queue: its own fields as parsed; the runner adds the ownership epoch. */
export function consumerSettingsOf(q: QueueConfig): ConsumerSettingsInput {
  const { name, ownership: _fencedByTheRunner, pools: _oneConsumerPerPool, ...settings } = q;
  // The supervisor's reconciler reclaims leases and probes waits for every queue.
  return { ...settings, queue: name, maintenance: false };
}

/** Why a redis+cluster:// URL cannot be used, or undefined (other URLs are ioredis's to judge). */
function clusterUrlProblem(url: string): string | undefined {
  if (!isClusterUrl(url)) return undefined;
  try {
    parseClusterUrl(url);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}
