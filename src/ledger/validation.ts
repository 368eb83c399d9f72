import { z } from 'zod';
import { ValidationError } from '../errors.js';
import { QUEUE_CLASSES } from './types.js';
import { isWellFormedText, NOT_WELL_FORMED } from './well-formed.js';

// The rules for input fields, as zod schemas, and validate(); JSON values are checked and encoded in json.ts.

export const queueName = z.string().regex(/^[a-z0-9._-]{1,64}$/, 'must be 1-64 chars of [a-z0-9._-]');
export const typeName = z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/, 'must be 1-128 chars of [A-Za-z0-9._:-]');
// SQL's PAD SPACE collations compare 'a' and 'a ' as equal: refuse trailing spaces
// so two keys the caller sees as different are never merged by the ledger. A
// lone surrogate would reach the UTF-8 column as U+FFFD, merging keys as well.
export const keyString = z
  .string()
  .min(1, 'must not be empty')
  .max(255, 'must be at most 255 characters')
  .refine(isWellFormedText, NOT_WELL_FORMED)
  .refine((v) => !/\s$/.test(v), 'must not end with whitespace');
export const laneKey = keyString;
/** A concurrency key: U+001F joins a type and a key in the rows of a type's own limit (sql/keys/scope.ts). */
export const concurrencyKeyString = keyString.refine(
  (v) => !v.includes('\u001f'),
  'must not contain U+001F (the unit separator)',
);
/** How a queue orders its keys' items: 'key' serves them in turn; null, oldest first. */
export const fairnessSchema = z.enum(['key']).nullable();
/** How many items of one concurrency key may be admitted at once; null: no limit. */
export const concurrencyLimitSchema = z.number().int('must be a whole number').min(1).max(100_000).nullable();
/** A queue's settings an operator writes (Ledger.updateQueue, createQueue): each optional; null clears it. */
export const queueSettingsSchema = z
  .object({
    slots: z.number().int('must be a whole number').min(1).max(1000).nullable().optional(),
    maxProcessing: z.number().int('must be a whole number').min(1).max(1_000_000).nullable().optional(),
    concurrencyLimit: concurrencyLimitSchema.optional(),
    paused: z.boolean().optional(),
  })
  .strict();
/** A durable step's name (ctx.step): unique per item. */
export const stepName = keyString;
/** A handler's stage (ctx.stage): a metric label, so a short name from a fixed set, never data. */
export const stageName = z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/, 'must be 1-64 chars of [A-Za-z0-9_.:-]');
export const itemId = z.string().regex(/^[A-Za-z0-9_-]{1,32}$/, 'must be an item id');
export const validDate = z.date().refine((d) => !Number.isNaN(d.getTime()), 'must be a valid date');
export const durationMs = z
  .number()
  .int('must be whole milliseconds')
  .min(0)
  .max(365 * 86_400_000);
export const positiveDurationMs = z
  .number()
  .int('must be whole milliseconds')
  .min(1)
  .max(365 * 86_400_000);
/** A consumer (lease owner) or deployment name. */
export const workerName = z.string().min(1).max(128).refine(isWellFormedText, NOT_WELL_FORMED);
/** Why an item was released, blocked or cancelled, as the attempt history records it. */
export const reasonText = z.string().max(1000).refine(isWellFormedText, NOT_WELL_FORMED);
export const queueClass = z.enum(QUEUE_CLASSES);

/** Parses `input` with `schema`, or throws a ValidationError naming every bad field. */
export function validate<S extends z.ZodType>(schema: S, input: unknown, context: string, prefix = ''): z.output<S> {
  const parsed = schema.safeParse(input);
  if (!parsed.success) throw ValidationError.fromZod(parsed.error, context, prefix);
  return parsed.data;
}
