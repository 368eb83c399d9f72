import { z } from 'zod';
import { ValidationError } from '../errors.js';
import { backoffSchema } from '../ledger/backoff.js';
import { QUEUE_CLASSES } from '../ledger/types.js';
import { queueName, typeName, workerName } from '../ledger/validation.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import type { HandlerEntry } from './types.js';

/** A consumer's executor slots when nothing sets them. */
export const DEFAULT_CONCURRENCY = 10;

/**
 * What a consumer takes while it runs (Consumer.retune): its slots and the fleet cap, as a supervisor reads
 * them from the ledger's queue settings or its own config (docs/design/supervisor.md, "Queue settings in the
 * ledger"). maxProcessing undefined: no cap.
 */
export interface LiveSettings {
  concurrency: number;
  maxProcessing: number | undefined;
}

/**
 * Tunables of a consumer, validated at construction. Each field's
 * `.describe()` is the text docs/configuration.md shows (`npm run docs:config`).
 */
export const consumerSettingsSchema = z
  .object({
    queue: queueName.describe('The queue this consumer claims from.'),
    concurrency: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .default(DEFAULT_CONCURRENCY)
      .describe('Executor slots: how many handlers run at once.'),
    /** docs/design/consumer.md, Prefetch; released at stop. 512 is near graphile-worker's local queue default (500). */
    prefetch: z
      .number()
      .int()
      .min(0)
      .max(10_000)
      .default(512)
      .describe(
        "Most items claimed ahead of free slots; items that concurrency keys admit as this consumer's items end may " +
          'briefly take as many again. The buffer adapts to how fast handlers start (none for slow ones); an item ' +
          'waits at most a third of its lease, then goes back unstarted. 0 = off; ignored with `maxProcessing`.',
      ),
    classes: z
      .array(z.enum(QUEUE_CLASSES))
      .min(1)
      .default([...QUEUE_CLASSES])
      .describe('Which queue classes to claim.'),
    preferClasses: z
      .array(z.enum(QUEUE_CLASSES))
      .min(1)
      .optional()
      .describe(
        'A preferred-class tier, non-binding: a claim round takes due heads of these classes first, in this order, ' +
          'then of its other classes (one claim per tier it needs). Default: none, every class in due order.',
      ),
    types: z
      .array(typeName)
      .optional()
      .describe(
        'Only these types are claimed. Default: every type, so an item whose type has no handler here ends per ' +
          '`unknownType` instead of waiting forever.',
      ),
    name: workerName
      .optional()
      .describe('Consumer name: the lease owner and the stream consumer. Default: host:pid:random.'),
    leaseMs: z
      .number()
      .int()
      .min(100)
      .max(3_600_000)
      .default(30_000)
      .describe('Lease length (ms); renewed while the handler runs.'),
    deadlineMs: z
      .number()
      .int()
      .min(0)
      .max(86_400_000)
      .default(600_000)
      .describe("Handler deadline for the queue (ms); 0 = none. A handler's own `deadlineMs` wins."),
    abortGraceMs: z
      .number()
      .int()
      .min(0)
      .max(600_000)
      .default(10_000)
      .describe(
        'How long (ms) a handler aborted at its deadline may take to settle before its lease is left to expire.',
      ),
    pollIntervalMs: z
      .number()
      .int()
      .min(10)
      .max(3_600_000)
      .default(5_000)
      .describe('Backstop ledger sweep interval (ms) while Redis is up.'),
    redisDownPollMs: z
      .number()
      .int()
      .min(10)
      .max(60_000)
      .default(1_000)
      .describe(
        'Sweep interval (ms) while Redis is unreachable (or without a wake channel, when smaller than ' +
          '`pollIntervalMs`).',
      ),
    readBlockMs: z
      .number()
      .int()
      .min(10)
      .max(60_000)
      .default(2_000)
      .describe("How long the process's one blocking read of the doorbell waits (ms): the shortest of its consumers'."),
    backoff: backoffSchema
      .default(backoffSchema.parse({}))
      .describe(
        'Retry backoff after a failed attempt, and the delay of a Defer() given no time (by its releases since the ' +
          'last spent attempt). Default: 1 s, ×2, at most 1 h, 20 % jitter.',
      ),
    deadlineBackoffMs: z
      .number()
      .int()
      .min(0)
      .max(86_400_000)
      .default(1_000)
      .describe('Delay (ms) of the release after a deadline (no attempt spent).'),
    unknownType: z
      .enum(['dead', 'release'])
      .default('release')
      .describe(
        "An item whose type has no handler here. 'release': back to pending without spending an attempt, for a " +
          'worker that has one (a rolling deploy), until `unknownTypeGraceMs` after the item was created; then, or ' +
          "at once with 'dead', it ends dead, class `unowned`.",
      ),
    unknownTypeReleaseMs: z
      .number()
      .int()
      .min(0)
      .max(86_400_000)
      .default(5_000)
      .describe(
        "Delay (ms) of each such release; it grows with the item's age (a quarter of it, up to a minute), never past " +
          'the grace.',
      ),
    unknownTypeGraceMs: z
      .number()
      .int()
      .min(0)
      .max(30 * 86_400_000)
      .default(3_600_000)
      .describe('How long (ms) after its creation an item of an unknown type is still released rather than dead.'),
    finalizeTimeoutMs: z
      .number()
      .int()
      .min(100)
      .max(600_000)
      .default(15_000)
      .describe('How long (ms) a finalize has on its own before the lease is left to expire.'),
    drainTimeoutMs: z
      .number()
      .int()
      .min(0)
      .max(3_600_000)
      .default(30_000)
      .describe(
        'At stop: how long (ms) running handlers may take to finish before they are aborted (reason shutdown).',
      ),
    maintenance: z
      .boolean()
      .default(true)
      .describe(
        'Each sweep also reclaims expired leases and probes dependency waits. Off under a supervisor, whose ' +
          'reconciler does it.',
      ),
    maxProcessing: z
      .number()
      .int()
      .min(1)
      .max(1_000_000)
      .optional()
      .describe(
        "Fleet-wide cap on this queue's `processing` items, held by the ledger in each claim's own transaction: " +
          'never exceeded, whatever the number of consumers. At the cap no new item is admitted; expired leases are ' +
          'still reclaimed, and go first. Capped claims of a queue take turns on one row. Default: none.',
      ),
    concurrencyLimit: z
      .number()
      .int()
      .min(1)
      .max(100_000)
      .optional()
      .describe(
        'At most this many items of one `concurrencyKey` admitted at once, fleet-wide: the ledger admits an item at ' +
          'enqueue or when an item of its key ends, and the rest wait unseen by claims. Stored in the ledger when ' +
          'the consumer starts (`ledger.setConcurrencyLimit`). Default: none (keys are counted, not limited).',
      ),
    fairness: z
      .enum(['key'])
      .optional()
      .describe(
        '`key`: the queue serves its `concurrencyKey`s in turn instead of oldest first. Each keyed item enqueued ' +
          "from then on takes its key's next round as its priority, so a flood of one key (over any number of lanes) " +
          "does not hold back another's items. Stored in the ledger when the consumer starts (`ledger.setFairness`). " +
          'Default: none.',
      ),
    epoch: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe('Ownership epoch to fence claims with (docs/design.md, Ownership epochs). Default: none.'),
    staleOnly: z
      .boolean()
      .default(false)
      .describe(
        'Claim only rescued work: items whose lease expired (reclaimed by a sweep), never new pending work. For the ' +
          'whole queue, fleet-wide and held by the ledger, use `lanewake stale-only <queue> on` instead ' +
          '(docs/design.md, Stale-only claims).',
      ),
    staleOnlyGate: z
      .object({
        poolWaiting: z
          .number()
          .int()
          .min(1)
          .max(100_000)
          .optional()
          .describe("Stale-only while at least this many requests wait for a connection of the ledger's pool."),
        claimMs: z
          .number()
          .int()
          .min(1)
          .max(3_600_000)
          .optional()
          .describe(
            'Stale-only while the last claim statement took at least this many ms; a stale-only claim is timed too, ' +
              'so the gate clears once claims are fast again.',
          ),
      })
      .strict()
      .optional()
      .describe(
        'Turn stale-only on by itself while the ledger is struggling: its pool saturated, or its claims slow ' +
          '(docs/design.md, Stale-only claims). Default: off.',
      ),
  })
  .strict();

export type ConsumerSettingsInput = z.input<typeof consumerSettingsSchema>;
export type ConsumerSettings = z.output<typeof consumerSettingsSchema>;

export interface ConsumerOptions<DB = Record<string, never>> extends ConsumerSettingsInput {
  ledger: Ledger;
  /** Without it the consumer only sweeps the ledger (every pollIntervalMs). */
  wake?: WakeChannel | undefined;
  handlers: Record<string, HandlerEntry<DB>>;
  logger?: Logger;
}

/** Takes `live` into a running consumer's settings, or throws ValidationError naming the field, changing nothing. */
export function retuneSettings(settings: ConsumerSettings, live: LiveSettings): void {
  const parsed = consumerSettingsSchema.pick({ concurrency: true, maxProcessing: true }).safeParse(live);
  if (!parsed.success) throw ValidationError.fromZod(parsed.error, 'consumer retune');
  settings.concurrency = parsed.data.concurrency;
  if (parsed.data.maxProcessing === undefined) delete settings.maxProcessing;
  else settings.maxProcessing = parsed.data.maxProcessing;
}
