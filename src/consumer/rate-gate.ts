import { ValidationError } from '../errors.js';
import type { ClaimedItem } from '../ledger/types.js';
import { sleep } from '../sleep.js';
import { RateLimitedError } from './errors.js';
import { writeRateLimited, type Outcome, type OutcomeDeps } from './job-outcome.js';
import type { ConsumerLedger } from './ledger-port.js';
import type { RateLimit } from './types.js';

/** A refusal whose turn is this close is waited for here, holding the slot, rather than sent back to pending. */
const WAIT_HERE_MS = 1_000;
const WAITS_HERE = 3;

/**
 * The consumer's side of a type's rate limit (docs/design/consumer.md, "Rate
 * limits"): before its handler runs, an item of a rate-limited type asks
 * the ledger for a start on its key, every way it arrived (a claim round, at
 * insert, an offer, a lane's successor). A coalesced group counts each of
 * its items. Granted: it runs. Refused with its key's next start near
 * (within a spacing, at most WAIT_HERE_MS): it waits here and asks again.
 * Refused for longer: it takes the next free turn of the key and goes back
 * to pending until then, its attempt not spent.
 */
export async function passRateGate(
  ledger: Pick<ConsumerLedger, 'takeRate' | 'reserveRateTurn'>,
  item: ClaimedItem,
  limit: RateLimit,
  payload: unknown,
): Promise<{ go: true; key: string } | { go: false; waitMs: number | 'leaseLost' }> {
  const key = rateKeyOf(limit, item, payload);
  const spacingMs = limit.perMs / limit.max;
  const intervalMs = spacingMs * (1 + (item.group?.ids.length ?? 0));
  for (let waited = 0; ; waited++) {
    const answer = await ledger.takeRate(item, { key, intervalMs });
    if (answer.granted) return { go: true, key };
    if ('lost' in answer) return { go: false, waitMs: 'leaseLost' };
    // An item back for its turn (just due) waits here for a late start before it; a fresh one does
    // only while nobody holds a turn, else it takes the next turn rather than race them.
    const backForTurn = answer.dueForMs <= WAIT_HERE_MS;
    const near = answer.waitMs <= (backForTurn ? WAIT_HERE_MS : Math.min(spacingMs, WAIT_HERE_MS));
    if ((backForTurn || !answer.queued) && near && waited < WAITS_HERE) {
      await sleep(answer.waitMs);
      continue;
    }
    return { go: false, waitMs: await ledger.reserveRateTurn({ queue: item.queue, key, intervalMs }) };
  }
}

/**
 * A run's gate: `{ key }` to run the handler, or the outcome written when
 * it may not start now (released until its turn, no attempt spent; nothing
 * written when its lease was lost). A ledger that cannot answer releases it
 * for a moment rather than let its lease run out.
 */
export async function rateGate(
  deps: OutcomeDeps,
  item: ClaimedItem,
  limit: RateLimit,
  payload: unknown,
): Promise<{ key: string } | { outcome: Outcome }> {
  const gate = await passRateGate(deps.ledger, item, limit, payload).catch((error: unknown) => {
    deps.log.warn({ id: item.id, err: (error as Error).message }, 'rate limit: the ledger did not answer; released');
    return { go: false as const, waitMs: Math.max(limit.perMs / limit.max, 1000) };
  });
  return gate.go ? { key: gate.key } : { outcome: await writeRateLimited(deps, item, gate.waitMs) };
}

/** A handler's RateLimitedError pushes its key's next start back for the whole fleet. */
export async function afterRateLimited(
  deps: OutcomeDeps,
  item: ClaimedItem,
  key: string,
  thrown: unknown,
): Promise<void> {
  if (!(thrown instanceof RateLimitedError)) return;
  await deps.ledger
    .pushRateWindow({ queue: item.queue, key, afterMs: thrown.retryAfterMs })
    .catch((error: unknown) =>
      deps.log.warn({ id: item.id, err: (error as Error).message }, 'rate limit: pushing the window back failed'),
    );
}

/** The item's rate key: the limit's function of the payload, its concurrency key, or the type. */
export function rateKeyOf(
  limit: RateLimit,
  item: Pick<ClaimedItem, 'type' | 'concurrencyKey'>,
  payload: unknown,
): string {
  if (limit.key === undefined) return item.type;
  if (limit.key === 'concurrencyKey') return item.concurrencyKey === null ? item.type : `key:${item.concurrencyKey}`;
  return limit.key(payload);
}

/** A handler's rateLimit, checked when the consumer is made: a bad one names its field. */
export function checkRateLimit(type: string, limit: RateLimit | undefined): void {
  if (limit === undefined) return;
  const issues: { field: string; message: string }[] = [];
  if (!Number.isInteger(limit.max) || limit.max < 1 || limit.max > 1_000_000)
    issues.push({ field: `handlers.${type}.rateLimit.max`, message: 'must be an integer from 1 to 1,000,000' });
  if (!Number.isInteger(limit.perMs) || limit.perMs < 1 || limit.perMs > 86_400_000)
    issues.push({ field: `handlers.${type}.rateLimit.perMs`, message: 'must be an integer from 1 to 86,400,000' });
  if (limit.key !== undefined && typeof limit.key !== 'function' && limit.key !== 'concurrencyKey')
    issues.push({
      field: `handlers.${type}.rateLimit.key`,
      message: "must be a function of the payload or 'concurrencyKey'",
    });
  if (issues.length > 0) throw new ValidationError(issues, 'consumer options');
}
