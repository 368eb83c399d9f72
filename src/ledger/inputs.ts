import { z } from 'zod';
import { backoffSchema } from './backoff.js';
import type { Executor } from './connection.js';
import { encodePayload } from './json.js';
import { ITEM_STATES, type QueueClass } from './types.js';
import {
  durationMs,
  itemId,
  concurrencyKeyString,
  keyString,
  laneKey,
  positiveDurationMs,
  queueClass,
  queueName,
  reasonText,
  typeName,
  validDate,
  workerName,
} from './validation.js';

// What the Ledger's calls take: each input's schema, and the type derived from it.

export const DEFAULT_MAX_ATTEMPTS = 25;

/** The most items one claim (or claim by ids) takes. */
export const MAX_CLAIM_ITEMS = 1000;

/** An enqueue item's fields, the payload's encoding aside (see `encodePayload`). */
export function enqueueItemFieldsSchema() {
  return z
    .object({
      queue: queueName,
      type: typeName,
      payload: z.unknown(),
      /** Ordering key: items of one lane run one at a time, in enqueue order. */
      lane: laneKey.optional(),
      /**
       * Groups items (a tenant, say): at most the queue's concurrencyLimit laneless items of one key are admitted at
       * once,
       * fleet-wide, and a fair queue serves its keys in turn. A laned item is ordered and admitted by its lane.
       */
      concurrencyKey: concurrencyKeyString.optional(),
      /** Smaller runs first among claimable heads. Default 0. */
      priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
      queueClass: queueClass.optional(),
      /** Attempt budget. Default 25. */
      maxAttempts: z.number().int().min(1).max(1000).optional(),
      /** Not claimable before this instant. */
      runAt: validDate.optional(),
      /** Not claimable before the ledger's now + delayMs. */
      delayMs: durationMs.optional(),
      /**
       * Unique per queue: a second enqueue of the same request (type, payload, lane) returns the first item with
       * `duplicate: true`; of a different request, throws IdempotencyConflictError.
       */
      idempotencyKey: keyString.optional(),
    })
    .strict()
    .superRefine((v, ctx) => {
      if (v.runAt !== undefined && v.delayMs !== undefined) {
        ctx.addIssue({ code: 'custom', path: ['runAt'], message: 'give runAt or delayMs, not both' });
      }
    });
}

/** A whole enqueue item, payload included: what the ledger accepts. */
export function enqueueItemSchema(payloadMaxBytes: number) {
  return enqueueItemFieldsSchema().superRefine((v, ctx) => {
    const encoded = encodePayload(v.payload, payloadMaxBytes);
    if ('error' in encoded)
      ctx.addIssue({ code: 'custom', path: ['payload', ...encoded.path], message: encoded.error });
  });
}

export type EnqueueInput = z.input<ReturnType<typeof enqueueItemFieldsSchema>>;

export interface EnqueueOptions {
  /**
   * Run inside the caller's transaction (a Kysely `Transaction` on the same
   * database): the items commit or roll back with the caller's own writes.
   */
  transaction?: Executor;
}

/** An item that may be inserted already claimed, as `enqueueClaiming`'s caller sees it. */
export interface ClaimCandidate {
  queue: string;
  type: string;
  queueClass: QueueClass;
}

/** The coalescing modes of a handler type (docs/design/batches-and-steps.md, Coalescing). */
export const COALESCE_MODES = ['latest', 'all', 'settled'] as const;
/** The most members one coalesced group may take besides its head. */
export const MAX_COALESCE = 10_000;

export const claimSchema = z
  .object({
    queue: queueName,
    /** Who claims: a stable consumer name, recorded as the lease owner. */
    owner: workerName,
    limit: z.number().int().min(1).max(MAX_CLAIM_ITEMS),
    leaseMs: positiveDurationMs,
    classes: z.array(queueClass).min(1, 'give at least one class, or leave it out for all').optional(),
    types: z.array(typeName).min(1, 'give at least one type, or leave it out for all').max(200).optional(),
    epoch: z.number().int().min(0).optional(),
    /**
     * The queue's fleet cap: the claim leaves at most this many of the queue's items processing
     * (docs/design/consumer.md,
     * "The fleet cap").
     */
    maxProcessing: z.number().int().min(1).max(1_000_000).optional(),
    /**
     * Claim only rescued work: items whose last lease expired, no new pending work (docs/design/consumer.md,
     * "Stale-only
     * claims").
     */
    staleOnly: z.boolean().optional(),
    /**
     * Heads of these types take their lane's next pending items of their type with them
     * (docs/design/batches-and-steps.md,
     * Coalescing).
     */
    coalesce: z
      .object({
        types: z.record(
          typeName,
          z.object({ mode: z.enum(COALESCE_MODES), max: z.number().int().min(1).max(MAX_COALESCE) }).strict(),
        ),
        maxBytes: z
          .number()
          .int()
          .min(1)
          .max(256 * 1024 * 1024),
      })
      .strict()
      .optional(),
  })
  .strict();

export type ClaimInput = z.input<typeof claimSchema>;

// Schemas are built once here: zod compiles each on first use, and building
// one per call showed up as the largest allocator on the claim path.
export const claimByIdsSchema = claimSchema
  .omit({ limit: true, classes: true })
  .extend({ ids: z.array(itemId).max(MAX_CLAIM_ITEMS) });
export const successorClaimSchema = z
  .object({
    owner: workerName,
    token: z.string().regex(/^[A-Za-z0-9_-]{16,32}$/, 'must be 16-32 chars of [A-Za-z0-9_-]'),
    leaseMs: positiveDurationMs,
    max: z.number().int().min(0).max(MAX_CLAIM_ITEMS),
    classes: z.array(queueClass).optional(),
    types: z.array(typeName).max(200).optional(),
  })
  .strict();

const failureClassSchema = z.string().regex(/^[a-z0-9_.:-]{1,64}$/, 'must be 1-64 chars of [a-z0-9_.:-]');
export const retrySchema = z.object({
  error: z.unknown(),
  failureClass: failureClassSchema.optional(),
  backoff: backoffSchema.optional(),
  /** Exact delay; overrides the backoff policy. */
  delayMs: durationMs.optional(),
});

export type RetryInput = z.input<typeof retrySchema>;

export const failSchema = z.object({ error: z.unknown(), failureClass: failureClassSchema.optional() });
export const releaseSchema = z
  .object({
    delayMs: durationMs.optional(),
    reason: reasonText.optional(),
    /**
     * No time given: back off by this policy, by the releases since the last spent attempt (sql/complete/deferrals.ts).
     */
    backoff: backoffSchema.optional(),
  })
  .strict()
  .superRefine((v, ctx) => {
    if (v.delayMs !== undefined && v.backoff !== undefined)
      ctx.addIssue({ code: 'custom', path: ['backoff'], message: 'give delayMs or backoff, not both' });
  });
export type ReleaseInput = z.input<typeof releaseSchema>;
export const blockSchema = z
  .object({
    dependencyKey: keyString,
    maxWaitMs: positiveDurationMs,
    probeAfterMs: positiveDurationMs.optional(),
    reason: reasonText.optional(),
  })
  .strict();

export const limitSchema = z.number().int().min(1).max(100_000);
export const wakeDependencySchema = z.object({ key: keyString, queue: queueName.optional() });
export const queueListSchema = z.array(queueName).max(10_000);
export const maintenanceSchema = z.object({ queue: queueName.optional(), limit: limitSchema.default(500) });
export const replaySchema = z.object({
  id: itemId,
  expectAttempt: z.number().int().min(0),
  expectErrorDigest: z.string().regex(/^[0-9a-f]{64}$/, 'must be a hex SHA-256'),
});
export const repairSchema = z.object({
  id: itemId,
  expectAttempt: z.number().int().min(0),
  expectErrorDigest: z.string().regex(/^[0-9a-f]{64}$/, 'must be a hex SHA-256'),
  reason: reasonText.pipe(z.string().min(1, 'must say why')),
  actor: workerName,
  repairId: itemId.optional(),
});
export const purgeSchema = z.object({
  olderThanMs: durationMs,
  limit: limitSchema.default(1000),
  queue: queueName.optional(),
});
export const listDeadSchema = z.object({ queue: queueName.optional(), limit: limitSchema.default(100) });
export const activateSchema = z.object({
  queue: queueName,
  deployment: workerName,
  expectEpoch: z.number().int().min(0).optional(),
});

/** A rate-limited start (docs/design/consumer.md, "Rate limits"): the key, and how far apart its starts must be. */
export const rateTakeSchema = z
  .object({
    key: keyString,
    /** perMs ÷ max, times the items starting (a coalesced group counts each). */
    intervalMs: z.number().positive().max(86_400_000),
  })
  .strict();
export const rateWindowSchema = z
  .object({ queue: queueName, key: keyString, afterMs: z.number().min(0).max(86_400_000) })
  .strict();

// An operator's views and bulk actions (src/ledger/operator.ts).

export const MAX_PAGE = 200;
const pageLimit = z.number().int('must be a whole number').min(1).max(MAX_PAGE).default(50);
const failureClassFilter = z.string().min(1).max(64);
export const itemFilterSchema = z
  .object({
    queue: queueName,
    state: z.enum(ITEM_STATES).optional(),
    type: typeName.optional(),
    lane: laneKey.optional(),
    key: keyString.optional(),
    idempotencyKey: keyString.optional(),
    id: itemId.optional(),
  })
  .strict();
export const pageSchema = z.object({ after: z.string().max(400).optional(), limit: pageLimit }).strict();
export const deadFilterSchema = z
  .object({
    queue: queueName,
    type: typeName.optional(),
    failureClass: failureClassFilter.optional(),
    lane: laneKey.optional(),
    key: keyString.optional(),
  })
  .strict();
export const purgeFilterSchema = z
  .object({
    queue: queueName,
    state: z.enum(['completed', 'skipped', 'dead', 'cancelled']),
    type: typeName.optional(),
    olderThanMs: durationMs.optional(),
  })
  .strict();
