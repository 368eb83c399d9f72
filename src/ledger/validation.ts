import { z } from 'zod';
import { ValidationError } from '../errors.js';
import { QUEUE_CLASSES } from './types.js';

export const queueName = z
  .string()
  .regex(/^[a-z0-9._-]{1,64}$/, 'must be 1-64 chars of [a-z0-9._-]');
export const typeName = z
  .string()
  .regex(/^[A-Za-z0-9._:-]{1,128}$/, 'must be 1-128 chars of [A-Za-z0-9._:-]');
// SQL's PAD SPACE collations compare 'a' and 'a ' as equal: refuse trailing spaces
// so two keys the caller sees as different are never merged by the ledger.
export const keyString = z
  .string()
  .min(1, 'must not be empty')
  .max(255, 'must be at most 255 characters')
  .refine((v) => !/\s$/.test(v), 'must not end with whitespace');
export const laneKey = keyString;
export const itemId = z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, 'must be an item id');
export const validDate = z.date().refine((d) => !Number.isNaN(d.getTime()), 'must be a valid date');
export const durationMs = z.number().int('must be whole milliseconds').min(0).max(365 * 86_400_000);
export const positiveDurationMs = z.number().int('must be whole milliseconds').min(1).max(365 * 86_400_000);
export const workerName = z.string().min(1).max(128);
export const queueClass = z.enum(QUEUE_CLASSES);

/** An enqueue item's fields, the payload's encoding aside (see `encodePayload`). */
export function enqueueItemFieldsSchema() {
  return z
    .object({
      queue: queueName,
      type: typeName,
      payload: z.unknown(),
      lane: laneKey.optional(),
      priority: z.number().int().min(-1_000_000).max(1_000_000).optional(),
      queueClass: queueClass.optional(),
      maxAttempts: z.number().int().min(1).max(1000).optional(),
      runAt: validDate.optional(),
      delayMs: durationMs.optional(),
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
    if ('error' in encoded) ctx.addIssue({ code: 'custom', path: ['payload'], message: encoded.error });
  });
}

/** The payload as the ledger stores it, or what is wrong with it. One encoding per item: the ledger validates and stores the same text. */
export function encodePayload(payload: unknown, maxBytes: number): { json: string } | { error: string } {
  const json = encodeJson(payload);
  if (json === undefined) return { error: 'must be JSON-serialisable (no undefined, functions, BigInt or cycles)' };
  if (Buffer.byteLength(json, 'utf8') > maxBytes) return { error: `must encode to at most ${maxBytes} bytes of JSON` };
  return { json };
}

export type EnqueueItem = z.output<ReturnType<typeof enqueueItemSchema>>;

/**
 * JSON text for a value, or undefined when it has no faithful JSON form
 * (undefined at the top, a function, a BigInt, a cycle, a non-finite number).
 */
export function encodeJson(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  try {
    if (plainlyFaithful(value, 0)) {
      const text = JSON.stringify(value);
      return typeof text === 'string' ? text : undefined;
    }
    // toJSON, deep nesting or something unfaithful somewhere: a replacer sees
    // every value after toJSON, exactly as it is written.
    let faithful = true;
    const text = JSON.stringify(value, (_key, v: unknown) => {
      if (typeof v === 'function' || typeof v === 'symbol') faithful = false;
      if (typeof v === 'number' && !Number.isFinite(v)) faithful = false;
      return v;
    });
    return faithful && typeof text === 'string' ? text : undefined;
  } catch {
    return undefined;
  }
}

/** Nesting the quick check walks before it leaves the value to the replacer. */
const QUICK_DEPTH = 32;

/**
 * True when `value` holds only strings, booleans, finite numbers, null,
 * undefined (dropped by JSON) and plain arrays and objects of those, within
 * QUICK_DEPTH levels, so JSON.stringify without a replacer writes it
 * faithfully. False means "check it the slow way", not "unfaithful". A
 * replacer is called for every value, which made it most of an enqueue's
 * encoding cost.
 */
function plainlyFaithful(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case 'string':
    case 'boolean':
    case 'undefined':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object': {
      if (value === null) return true;
      if (depth >= QUICK_DEPTH) return false;
      if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return false;
      if (Array.isArray(value)) {
        for (const v of value) if (!plainlyFaithful(v, depth + 1)) return false;
        return true;
      }
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      for (const key in value) {
        if (Object.hasOwn(value, key) && !plainlyFaithful((value as Record<string, unknown>)[key], depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/** Parses `input` with `schema`, or throws a ValidationError naming every bad field. */
export function validate<S extends z.ZodType>(schema: S, input: unknown, context: string, prefix = ''): z.output<S> {
  const parsed = schema.safeParse(input);
  if (!parsed.success) throw ValidationError.fromZod(parsed.error, context, prefix);
  return parsed.data;
}
