import { ValidationError, type FieldIssue } from '../errors.js';
import type { Handler, HandlerDefinition, RegisteredHandler } from '../consumer/types.js';
import type { StandardSchemaV1 } from './standard-schema.js';

type Schemas = Readonly<Record<string, StandardSchemaV1>>;

/**
 * A typed type's handler: a function, or a definition (defineHandler's options; the schema is the registry's).
 * A batch handler (defineBatchHandler) is not typed here: a union with it loses the contextual type of `handle`'s job.
 */
export type TypedHandlerEntry<Out, DB> = Handler<Out, DB> | Omit<HandlerDefinition<Out, DB>, 'schema'>;

/**
 * A registered handler that still says its payload types (a phantom
 * property, never set), so lanewake/testing can type a test's payload.
 */
export type TypedHandler<In, Out, DB> = RegisteredHandler<DB> & { readonly '~payload'?: { input: In; output: Out } };

/**
 * What `jobs.handlers()` returns, for `Consumer`'s `handlers` or a worker's handlers module: the types given (a
 * consumer may take some only).
 */
export type TypedHandlers<S extends Schemas, K extends keyof S, DB> = {
  [T in K]: TypedHandler<StandardSchemaV1.InferInput<S[T]>, StandardSchemaV1.InferOutput<S[T]>, DB>;
};

/**
 * Attaches each type's registry schema to its handler, so the consumer checks payloads before
 * the handler runs. @internal
 */
export function typedHandlers<S extends Schemas, K extends keyof S, DB>(
  queue: string,
  schemas: S | undefined,
  handlers: { [T in K]: TypedHandlerEntry<never, DB> },
): TypedHandlers<S, K, DB> {
  const issues: FieldIssue[] = [];
  if (schemas === undefined)
    throw new ValidationError(
      [{ field: 'queue', message: `${queue} is not a queue of the job registry` }],
      'jobs.handlers',
    );
  if (typeof handlers !== 'object' || handlers === null)
    throw new ValidationError([{ field: 'handlers', message: 'must map types to handlers' }], 'jobs.handlers');
  const out: Record<string, RegisteredHandler<DB>> = {};
  for (const [type, entry] of Object.entries(handlers as Record<string, unknown>)) {
    const schema = Object.hasOwn(schemas, type) ? schemas[type] : undefined;
    if (schema === undefined) {
      issues.push({ field: `handlers.${type}`, message: `is not a type of queue ${queue} in the job registry` });
      continue;
    }
    if (typeof entry === 'function') {
      out[type] = { handle: entry as Handler<unknown, DB>, schema };
    } else if (
      typeof entry === 'object' &&
      entry !== null &&
      typeof (entry as { handle?: unknown }).handle === 'function'
    ) {
      out[type] = { ...(entry as RegisteredHandler<DB>), schema };
    } else {
      issues.push({ field: `handlers.${type}`, message: 'must be a function or { handle }' });
    }
  }
  if (issues.length > 0) throw new ValidationError(issues, 'jobs.handlers');
  return out as TypedHandlers<S, K, DB>;
}
