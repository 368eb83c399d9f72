import { ConflictRetriesExhaustedError } from '../errors.js';

/**
 * Errors after which the whole transaction may simply run again:
 * MySQL/MariaDB deadlock (1213) and lock-wait timeout (1205); TiDB write
 * conflict (9007), optimistic-commit conflict (8002), schema-change retry
 * (8022, 8028).
 */
const RETRYABLE_ERRNOS = new Set([1213, 1205, 9007, 8002, 8022, 8028]);

export function errno(error: unknown): number | undefined {
  if (typeof error === 'object' && error !== null && 'errno' in error) {
    const n = (error as { errno: unknown }).errno;
    return typeof n === 'number' ? n : undefined;
  }
  return undefined;
}

export function isRetryableConflict(error: unknown): boolean {
  const n = errno(error);
  return n !== undefined && RETRYABLE_ERRNOS.has(n);
}

export const ER_DUP_ENTRY = 1062;

export interface RetryPolicy {
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 8, baseDelayMs: 5, maxDelayMs: 250 };

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Runs `fn` until it succeeds, retrying (bounded, with full jitter) while it
 * fails with a retryable conflict or one the caller declares retryable.
 */
export async function retryOnConflict<T>(
  fn: () => Promise<T>,
  policy: RetryPolicy = DEFAULT_RETRY,
  extraRetryable: (error: unknown) => boolean = () => false,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (!isRetryableConflict(error) && !extraRetryable(error)) throw error;
      if (attempt >= policy.maxAttempts) throw new ConflictRetriesExhaustedError(attempt, error);
      const cap = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (attempt - 1));
      await sleep(Math.random() * cap);
    }
  }
}
