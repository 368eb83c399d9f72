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

export function enqueueItemSchema(payloadMaxBytes: number) {
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
      const encoded = encodeJson(v.payload);
      if (encoded === undefined) {
        ctx.addIssue({ code: 'custom', path: ['payload'], message: 'must be JSON-serialisable (no undefined, functions, BigInt or cycles)' });
      } else if (Buffer.byteLength(encoded, 'utf8') > payloadMaxBytes) {
        ctx.addIssue({ code: 'custom', path: ['payload'], message: `must encode to at most ${payloadMaxBytes} bytes of JSON` });
      }
    });
}
export type EnqueueItem = z.output<ReturnType<typeof enqueueItemSchema>>;

/**
 * JSON text for a value, or undefined when it has no faithful JSON form
 * (undefined at the top, a function, a BigInt, a cycle, a non-finite number).
 */
export function encodeJson(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  try {
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

/** Parses `input` with `schema`, or throws a ValidationError naming every bad field. */
export function validate<S extends z.ZodType>(schema: S, input: unknown, context: string, prefix = ''): z.output<S> {
  const parsed = schema.safeParse(input);
  if (!parsed.success) throw ValidationError.fromZod(parsed.error, context, prefix);
  return parsed.data;
}
