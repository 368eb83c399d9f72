import { z } from 'zod';
import { backoffSchema } from '../ledger/backoff.js';
import { QUEUE_CLASSES } from '../ledger/types.js';
import { queueName, typeName, workerName } from '../ledger/validation.js';

/** Tunables of a consumer, validated at construction (defaults: docs/design.md §6). */
export const consumerSettingsSchema = z
  .object({
    queue: queueName,
    /** Executor slots: how many handlers run at once. */
    concurrency: z.number().int().min(1).max(1000).default(10),
    /**
     * Most items claimed ahead of free slots (docs/design.md, Prefetch). The buffer
     * adapts to the start rate (none for slow handlers), an item waits at most
     * a third of its lease before going back unstarted, and the buffer is
     * released at stop. Default 512; 0 turns it off; ignored with
     * `maxProcessing`.
     */
    prefetch: z.number().int().min(0).max(10_000).optional(),
    classes: z.array(z.enum(QUEUE_CLASSES)).min(1).default([...QUEUE_CLASSES]),
    /**
     * Only these types are claimed. Default: every type, so an item whose type
     * has no handler here ends per `unknownType` instead of waiting forever.
     */
    types: z.array(typeName).optional(),
    /** Consumer name: lease owner and stream consumer. Default host:pid:random. */
    name: workerName.optional(),
    leaseMs: z.number().int().min(100).max(3_600_000).default(30_000),
    /** Per-queue handler deadline; 0 = none. */
    deadlineMs: z.number().int().min(0).max(86_400_000).default(600_000),
    /** How long a handler aborted at its deadline may take to settle before its lease is left to expire. */
    abortGraceMs: z.number().int().min(0).max(600_000).default(10_000),
    /** Backstop ledger sweep while Redis is up. */
    pollIntervalMs: z.number().int().min(10).max(3_600_000).default(5_000),
    /** Sweep interval while Redis is unreachable (or no wake channel is configured and this is smaller). */
    redisDownPollMs: z.number().int().min(10).max(60_000).default(1_000),
    /** XREADGROUP BLOCK time. */
    readBlockMs: z.number().int().min(10).max(60_000).default(2_000),
    backoff: backoffSchema.default(backoffSchema.parse({})),
    /** Backoff of a release after a deadline (no budget burn). */
    deadlineBackoffMs: z.number().int().min(0).max(86_400_000).default(1_000),
    /**
     * An item whose type has no handler here. 'release' (default): back to
     * pending without spending an attempt, for a worker that has one (a
     * rolling deploy), until `unknownTypeGraceMs` after the item was created;
     * then, or at once with 'dead', it ends dead, class `unowned`.
     */
    unknownType: z.enum(['dead', 'release']).default('release'),
    /** Delay of each such release; it grows with the item's age (a quarter of it, up to a minute), never past the grace. */
    unknownTypeReleaseMs: z.number().int().min(0).max(86_400_000).default(5_000),
    /** How long after its creation an item of an unknown type is still released rather than dead. */
    unknownTypeGraceMs: z.number().int().min(0).max(30 * 86_400_000).default(3_600_000),
    /** A finalize has this long on its own before the lease is left to expire. */
    finalizeTimeoutMs: z.number().int().min(100).max(600_000).default(15_000),
    /**
     * Let this consumer also reclaim expired leases and probe dependency waits
     * on each sweep. Off under a supervisor, whose reconciler does it.
     */
    maintenance: z.boolean().default(true),
    /**
     * Fleet-wide cap on this queue's `processing` items, read from the ledger
     * before each claim. The read and the claim are two statements, so
     * consumers claiming at the same instant can overshoot it by their batch.
     */
    maxProcessing: z.number().int().min(1).max(1_000_000).optional(),
    /** Ownership epoch to fence claims with (docs/design.md, Ownership epochs). */
    epoch: z.number().int().min(0).optional(),
  })
  .strict();

export type ConsumerSettingsInput = z.input<typeof consumerSettingsSchema>;
export type ConsumerSettings = z.output<typeof consumerSettingsSchema>;
