import { z } from 'zod';

export const backoffSchema = z.object({
  baseMs: z.number().int().min(0).max(86_400_000).default(1000).describe('Delay (ms) after the first failed attempt.'),
  factor: z.number().min(1).max(10).default(2).describe('Each further failed attempt multiplies the delay by this.'),
  maxMs: z
    .number()
    .int()
    .min(0)
    .max(30 * 86_400_000)
    .default(3_600_000)
    .describe('Longest delay (ms).'),
  jitter: z
    .number()
    .min(0)
    .max(1)
    .default(0.2)
    .describe('Share of each delay drawn at random: 0 = exact delays; 1 = each delay drawn uniformly from [0, delay].'),
});
export type BackoffPolicy = z.output<typeof backoffSchema>;
export type BackoffInput = z.input<typeof backoffSchema>;

export const DEFAULT_BACKOFF: BackoffPolicy = backoffSchema.parse({});

/** Delay before the retry that follows failed attempt number `attempt` (1-based). */
export function backoffDelayMs(policy: BackoffPolicy, attempt: number, random: () => number = Math.random): number {
  const raw = policy.baseMs * policy.factor ** Math.max(0, attempt - 1);
  const capped = Math.min(policy.maxMs, raw);
  const jittered = capped * (1 - policy.jitter * random());
  return Math.max(0, Math.round(jittered));
}
