import { z } from 'zod';
import { ValidationError } from '../errors.js';
import { COALESCE_MODES, MAX_COALESCE } from '../ledger/inputs.js';
import type { ClaimedItem, CoalesceMode } from '../ledger/types.js';
import type { CoalescedView, RegisteredHandler } from './types.js';

/** Members one group takes at most besides its head, unless the handler says (`coalesceMax`). */
export const DEFAULT_COALESCE_MAX = 1000;
/** Payload bytes one group hands its handler at most, the head's included. */
export const COALESCE_MAX_BYTES = 8 * 1024 * 1024;

const handlerCoalescing = z
  .object({
    coalesce: z.enum(COALESCE_MODES).optional(),
    coalesceMax: z.number().int().min(1).max(MAX_COALESCE).optional(),
  })
  .refine((h) => h.coalesceMax === undefined || h.coalesce !== undefined, {
    message: 'needs coalesce',
    path: ['coalesceMax'],
  });

/** What the claims of a consumer coalesce: per type, the mode and the cap (undefined when no handler coalesces). */
export interface CoalesceClaim {
  types: Record<string, { mode: CoalesceMode; max: number }>;
  maxBytes: number;
}

/**
 * The coalescing types of a consumer's handlers (docs/design/batches-and-steps.md,
 * Coalescing), checked: a bad mode or cap is a ValidationError naming
 * `handlers.<type>.coalesce` or `.coalesceMax`.
 */
export function coalesceClaimOf<DB>(handlers: ReadonlyMap<string, RegisteredHandler<DB>>): CoalesceClaim | undefined {
  const types: CoalesceClaim['types'] = {};
  for (const [type, h] of handlers) {
    const parsed = handlerCoalescing.safeParse({ coalesce: h.coalesce, coalesceMax: h.coalesceMax });
    if (!parsed.success) throw ValidationError.fromZod(parsed.error, 'consumer options', `handlers.${type}`);
    if (parsed.data.coalesce !== undefined)
      types[type] = { mode: parsed.data.coalesce, max: parsed.data.coalesceMax ?? DEFAULT_COALESCE_MAX };
  }
  return Object.keys(types).length === 0 ? undefined : { types, maxBytes: COALESCE_MAX_BYTES };
}

/**
 * The payload a run of `item` hands its handler and the group view beside
 * it (`job.coalesced`): every run of a coalescing type (`mode` set) gets one,
 * a group of one included; `latest` and the others see the newest payload as
 * `job.payload`. Items of other types run as themselves.
 */
export function groupView(
  item: ClaimedItem,
  mode: CoalesceMode | undefined,
): { payload: unknown; coalesced: CoalescedView | undefined } {
  const g = item.group;
  if (g === undefined) {
    if (mode === undefined) return { payload: item.payload, coalesced: undefined };
    const ids = [item.id];
    if (mode === 'latest') return { payload: item.payload, coalesced: { ids, count: 1 } };
    return { payload: item.payload, coalesced: { ids, count: 1, payloads: [...(item.unsettled ?? []), item.payload] } };
  }
  const ids = [item.id, ...g.ids];
  const payloads = g.payloads;
  const coalesced: CoalescedView =
    payloads === undefined ? { ids, count: ids.length } : { ids, count: ids.length, payloads };
  return { payload: g.newest, coalesced };
}
