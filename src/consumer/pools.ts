import { z } from 'zod';
import { ValidationError } from '../errors.js';
import { QUEUE_CLASSES, type QueueClass } from '../ledger/types.js';
import { Consumer, type ConsumerOptions } from './consumer.js';

/**
 * Executor pools (docs/design/consumer.md, "Executor pools"): a queue's slots
 * split by queue class, so a flood of one class cannot take the room kept
 * for another. Each pool runs as a consumer of its own with its classes
 * and its share of the slots.
 * - latency: interactive and default items;
 * - bulk: bulk items only;
 * - shared: every class.
 */
export const POOL_PROFILES = {
  latency: ['interactive', 'default'],
  bulk: ['bulk'],
  shared: [...QUEUE_CLASSES],
} as const satisfies Record<string, readonly QueueClass[]>;
export type PoolProfile = keyof typeof POOL_PROFILES;

/**
 * The preferred-class tiers a pool may take, non-binding (it claims the
 * later tiers when the earlier ones have nothing due):
 * - reserved: interactive, then default, then bulk;
 * - default-heavy: default, then interactive, then bulk.
 */
export const CLASS_PREFERENCES = {
  reserved: ['interactive', 'default', 'bulk'],
  'default-heavy': ['default', 'interactive', 'bulk'],
} as const satisfies Record<string, readonly QueueClass[]>;
export type ClassPreference = keyof typeof CLASS_PREFERENCES;

export const poolSchema = z
  .object({
    profile: z
      .enum(Object.keys(POOL_PROFILES) as [PoolProfile, ...PoolProfile[]])
      .describe('latency (interactive + default), bulk, or shared (every class).'),
    concurrency: z.number().int().min(1).max(10_000).describe("The pool's slots."),
    prefer: z
      .enum(Object.keys(CLASS_PREFERENCES) as [ClassPreference, ...ClassPreference[]])
      .optional()
      .describe(
        'A preferred-class tier: reserved (interactive, default, bulk) or default-heavy (default, interactive, bulk).',
      ),
  })
  .strict();
export type PoolSpec = z.infer<typeof poolSchema>;

export const poolsSchema = z
  .union([z.literal('auto'), z.array(poolSchema).min(1)])
  .describe(
    "Executor pools: 'auto' splits the concurrency as a quarter latency, a quarter bulk and the rest shared " +
      '(preferring reserved); or a list of { profile, concurrency, prefer }. Default: one pool of every class.',
  );
export type PoolsInput = z.infer<typeof poolsSchema>;

/** One pool as it runs: a consumer's classes, slots and preferred tier. */
export interface PoolPlan {
  profile: PoolProfile;
  classes: QueueClass[];
  concurrency: number;
  preferClasses?: QueueClass[];
  /**
   * 0 for a pool that shares a class with another pool: it claims only for
   * free slots, so it never holds an item in its prefetch buffer, its slots
   * busy, that the other pool could start now.
   */
  prefetch?: 0;
}

/**
 * The pools of a queue with `concurrency` slots, each limited to the
 * queue's `classes` (when set). A pool left with no class, or 'auto' on
 * fewer than 2 slots, is refused with the field named.
 */
export function planPools(
  concurrency: number,
  pools: PoolsInput,
  classes: readonly QueueClass[] = QUEUE_CLASSES,
  field = 'pools',
): PoolPlan[] {
  const specs: PoolSpec[] = pools === 'auto' ? autoPools(concurrency, field) : pools;
  return specs.map((p, i) => {
    const own = POOL_PROFILES[p.profile].filter((c) => classes.includes(c));
    if (own.length === 0) {
      throw new ValidationError(
        [
          {
            field: `${field}.${i}.profile`,
            message: `a ${p.profile} pool serves none of the queue's classes (${classes.join(', ')})`,
          },
        ],
        'pools',
      );
    }
    const prefer = p.prefer === undefined ? undefined : CLASS_PREFERENCES[p.prefer].filter((c) => own.includes(c));
    const shares = specs.some(
      (o, j) => j !== i && POOL_PROFILES[o.profile].some((c) => own.includes(c) && classes.includes(c)),
    );
    return {
      profile: p.profile,
      classes: [...own],
      concurrency: p.concurrency,
      ...(prefer !== undefined ? { preferClasses: prefer } : {}),
      ...(shares ? { prefetch: 0 as const } : {}),
    };
  });
}

/** What a pool sets on its consumer's options: its classes, slots, preferred tier and prefetch. */
export function poolSettings(plan: PoolPlan): {
  concurrency: number;
  classes: QueueClass[];
  preferClasses?: QueueClass[];
  prefetch?: number;
} {
  return {
    concurrency: plan.concurrency,
    classes: plan.classes,
    ...(plan.preferClasses !== undefined ? { preferClasses: plan.preferClasses } : {}),
    ...(plan.prefetch !== undefined ? { prefetch: plan.prefetch } : {}),
  };
}

function autoPools(concurrency: number, field: string): PoolSpec[] {
  if (concurrency < 2)
    throw new ValidationError(
      [{ field, message: `'auto' needs a concurrency of 2 or more to split, not ${concurrency}` }],
      'pools',
    );
  const latency = Math.max(1, Math.floor(concurrency / 4));
  const bulk = Math.max(1, Math.floor(concurrency / 4));
  const shared = concurrency - latency - bulk;
  return [
    { profile: 'latency', concurrency: latency },
    { profile: 'bulk', concurrency: bulk },
    ...(shared > 0 ? [{ profile: 'shared' as const, concurrency: shared, prefer: 'reserved' as const }] : []),
  ];
}

/**
 * The consumers of one queue's pools, for a library user (the worker builds
 * them from its config): one Consumer per pool, each with the options
 * given and its pool's classes, slots and preferred tier. Start and stop
 * them together.
 */
export function poolConsumers<DB>(options: ConsumerOptions<DB> & { pools: PoolsInput }): Consumer<DB>[] {
  const { pools, concurrency, classes, name, ...rest } = options;
  if (concurrency === undefined && pools === 'auto') {
    throw new ValidationError(
      [{ field: 'concurrency', message: "'auto' pools split the concurrency: give it" }],
      'pools',
    );
  }
  const parsedPools = poolsSchema.safeParse(pools);
  if (!parsedPools.success)
    throw new ValidationError(
      [{ field: 'pools', message: parsedPools.error.issues[0]?.message ?? 'invalid' }],
      'pools',
    );
  return planPools(concurrency ?? 0, parsedPools.data, classes).map(
    (plan) =>
      new Consumer<DB>({
        ...rest,
        ...(name !== undefined ? { name: `${name}:${plan.profile}` } : {}),
        ...poolSettings(plan),
      }),
  );
}
