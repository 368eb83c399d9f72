import { ValidationError } from '../errors.js';
import { concurrencyLimitSchema } from '../ledger/validation.js';
import { BatchGatherer } from './batches.js';
import type { BatchLedger } from './ledger-port.js';
import { checkRateLimit } from './rate-gate.js';
import { normalizeHandler, type HandlerEntry, type RegisteredHandler } from './types.js';

/**
 * A consumer's handlers as it runs them, by type: each entry normalized and
 * its rate limit checked, and a batch handler put behind a gatherer that
 * calls it once per batch while its items each run on their own
 * (docs/design/handlers.md). Bad definitions are a ValidationError naming the field.
 */
export function handlerTable<DB>(
  handlers: Record<string, HandlerEntry<DB>>,
  /** What batch handlers' gatherers write their outcomes through. */
  ledger: BatchLedger,
): Map<string, RegisteredHandler<DB>> {
  if (typeof handlers !== 'object' || handlers === null || Object.keys(handlers).length === 0) {
    throw new ValidationError(
      [{ field: 'handlers', message: 'must map at least one type to a handler' }],
      'consumer options',
    );
  }
  const table = new Map(Object.entries(handlers).map(([type, h]) => [type, normalizeHandler(h)]));
  for (const [type, def] of table) {
    checkRateLimit(type, def.rateLimit);
    if (def.concurrencyLimit !== undefined && !concurrencyLimitSchema.safeParse(def.concurrencyLimit).success)
      throw new ValidationError(
        [{ field: `handlers.${type}.concurrencyLimit`, message: 'must be a whole number from 1 to 100,000' }],
        'consumer options',
      );
    if (def.batch === undefined) continue;
    if (def.coalesce !== undefined)
      throw new ValidationError(
        [{ field: `handlers.${type}.coalesce`, message: 'a batch handler does not coalesce' }],
        'consumer options',
      );
    table.set(type, {
      ...def,
      handle: new BatchGatherer<DB>(type, def.batch.options, def.batch.handle, ledger).handleOne,
    });
  }
  return table;
}
