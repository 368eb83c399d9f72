import type { EnqueueInput } from '../ledger/inputs.js';
import type { StandardSchemaV1 } from './standard-schema.js';

// The types of a job registry (registry.ts), apart from it so the typed producer and handlers need not import it.

/** Queue → type → payload schema: any Standard Schema validator (zod 4, valibot, arktype, …). */
export type JobSchemas = Readonly<Record<string, Readonly<Record<string, StandardSchemaV1>>>>;

export type QueueName<R extends JobSchemas> = keyof R & string;
export type TypeName<R extends JobSchemas, Q extends QueueName<R>> = keyof R[Q] & string;
/** What a producer passes: the schema's input type. */
export type PayloadInput<
  R extends JobSchemas,
  Q extends QueueName<R>,
  T extends TypeName<R, Q>,
> = StandardSchemaV1.InferInput<R[Q][T]>;
/** What a handler gets: the schema's output type. */
export type PayloadOutput<
  R extends JobSchemas,
  Q extends QueueName<R>,
  T extends TypeName<R, Q>,
> = StandardSchemaV1.InferOutput<R[Q][T]>;

/** An enqueue's options besides queue, type and payload (lane, priority, delayMs, idempotencyKey, …). */
export type TypedEnqueueOptions = Omit<EnqueueInput, 'queue' | 'type' | 'payload'>;

/**
 * One item of a typed enqueueMany: a union over every (queue, type) of the registry, so `payload` is checked
 * against its type's schema.
 */
export type TypedEnqueueInput<R extends JobSchemas> = {
  [Q in QueueName<R>]: {
    [T in TypeName<R, Q>]: { queue: Q; type: T; payload: PayloadInput<R, Q, T> } & TypedEnqueueOptions;
  }[TypeName<R, Q>];
}[QueueName<R>];

/** What the typed producer asks of its registry. */
export interface JobChecks<R extends JobSchemas> {
  input<Q extends QueueName<R>, T extends TypeName<R, Q>>(
    queue: Q,
    type: T,
    payload: PayloadInput<R, Q, T>,
    options?: TypedEnqueueOptions,
  ): Promise<EnqueueInput>;
  check(items: readonly { queue: unknown; type: unknown; payload: unknown }[], many: boolean): Promise<void>;
}
