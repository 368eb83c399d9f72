import { ValidationError, fieldPath, type FieldIssue } from '../errors.js';
import type { EnqueueInput } from '../ledger/inputs.js';
import type {
  JobChecks,
  JobSchemas,
  PayloadInput,
  PayloadOutput,
  QueueName,
  TypeName,
  TypedEnqueueOptions,
} from './types.js';
import { queueName, typeName } from '../ledger/validation.js';
import type { Producer } from '../producer/producer.js';
import { checkSchema, type StandardSchemaV1 } from './standard-schema.js';
import { typedHandlers, type TypedHandlerEntry, type TypedHandlers } from './typed-handlers.js';
import { TypedProducer } from './typed-producer.js';

/**
 * The job registry: one declaration of every queue's types and their
 * payload schemas, shared by producers (`producer()`, `input()`) and
 * consumers (`handlers()`), so a misspelled queue or type or a wrong payload
 * fails to compile, and at run time a payload is checked before anything is
 * written (docs/design/handlers.md, Typed jobs).
 */
export class JobRegistry<R extends JobSchemas> implements JobChecks<R> {
  constructor(readonly schemas: R) {
    const issues: FieldIssue[] = [];
    for (const [queue, types] of Object.entries(schemas)) {
      if (!queueName.safeParse(queue).success)
        issues.push({ field: `jobs.${queue}`, message: 'must be a queue name: 1-64 chars of [a-z0-9._-]' });
      for (const [type, schema] of Object.entries(types)) {
        if (!typeName.safeParse(type).success)
          issues.push({
            field: `jobs.${queue}.${type}`,
            message: 'must be a type name: 1-128 chars of [A-Za-z0-9._:-]',
          });
        else if (typeof (schema as Partial<StandardSchemaV1> | undefined)?.['~standard']?.validate !== 'function') {
          issues.push({
            field: `jobs.${queue}.${type}`,
            message: 'must be a Standard Schema validator (zod 4, valibot, arktype, …)',
          });
        }
      }
    }
    if (issues.length > 0) throw new ValidationError(issues, 'defineJobs');
  }

  /** The schema of a (queue, type), or undefined when the registry has none. */
  schemaOf(queue: string, type: string): StandardSchemaV1 | undefined {
    const types = Object.hasOwn(this.schemas, queue) ? this.schemas[queue] : undefined;
    return types !== undefined && Object.hasOwn(types, type) ? types[type] : undefined;
  }

  /**
   * The issues of one item against the registry, fields named under `prefix`
   * (`payload.orderId`, `items[2].payload.orderId`); none when it conforms.
   */
  async issuesOf(item: { queue: unknown; type: unknown; payload: unknown }, prefix = ''): Promise<FieldIssue[]> {
    const at = (field: string): string => (prefix === '' ? field : `${prefix}.${field}`);
    if (typeof item.queue !== 'string' || !Object.hasOwn(this.schemas, item.queue))
      return [{ field: at('queue'), message: 'is not a queue of the job registry' }];
    const schema = typeof item.type === 'string' ? this.schemaOf(item.queue, item.type) : undefined;
    if (schema === undefined)
      return [{ field: at('type'), message: `is not a type of queue ${item.queue} in the job registry` }];
    const check = await checkSchema(schema, item.payload);
    if (check.ok) return [];
    return check.issues.map((i) => ({ field: fieldPath(at('payload'), i.path), message: i.message }));
  }

  /**
   * The items checked against the registry: throws one ValidationError naming
   * every refused field (`items[i].…` when `many`), before anything is written.
   */
  async check(items: readonly { queue: unknown; type: unknown; payload: unknown }[], many: boolean): Promise<void> {
    if (!Array.isArray(items)) throw new ValidationError([{ field: 'items', message: 'must be an array' }], 'enqueue');
    const issues = (await Promise.all(items.map((item, i) => this.issuesOf(item, many ? `items[${i}]` : '')))).flat();
    if (issues.length > 0) throw new ValidationError(issues, 'enqueue');
  }

  /**
   * A checked EnqueueInput, for the Ledger's own calls
   * (`ledger.enqueue(await jobs.input(…), { transaction })`) and
   * `producer.enqueueWithin`. The payload written is the one passed (the
   * schema's input); the handler gets the schema's output.
   */
  async input<Q extends QueueName<R>, T extends TypeName<R, Q>>(
    queue: Q,
    type: T,
    payload: PayloadInput<R, Q, T>,
    options: TypedEnqueueOptions = {},
  ): Promise<EnqueueInput> {
    const item = { ...options, queue, type, payload };
    await this.check([item], false);
    return item;
  }

  /** Typed enqueues through `producer`: its own transactions, the caller's (`transaction`), and `enqueueWithin`. */
  producer(producer: Producer): TypedProducer<R> {
    return new TypedProducer(this, producer);
  }

  /**
   * Handlers of one queue, typed from the registry: `job.payload` is the
   * schema's output, and the consumer checks every payload against the
   * schema before its handler runs (one it refuses ends dead, class
   * `invalid_payload`, no retry). Returns what `Consumer`'s `handlers` and
   * the worker's handlers module take. For `ctx.transaction`'s query
   * builder, `jobs.withDatabase<AppDb>().handlers(…)`.
   */
  handlers<Q extends QueueName<R>, K extends TypeName<R, Q>>(
    queue: Q,
    handlers: { [T in K]: TypedHandlerEntry<PayloadOutput<R, Q, T>, Record<string, never>> },
  ): TypedHandlers<R[Q], K, Record<string, never>> {
    return typedHandlers(queue, this.schemas[queue], handlers);
  }

  /** `handlers()` whose ctx.transaction hands out a `Transaction<DB>`. */
  withDatabase<DB>(): {
    handlers<Q extends QueueName<R>, K extends TypeName<R, Q>>(
      queue: Q,
      handlers: { [T in K]: TypedHandlerEntry<PayloadOutput<R, Q, T>, DB> },
    ): TypedHandlers<R[Q], K, DB>;
  } {
    return { handlers: (queue, handlers) => typedHandlers(queue, this.schemas[queue], handlers) };
  }
}

/** Declares the job registry: `defineJobs({ billing: { 'invoice.send': z.object({ orderId: z.string() }) } })`. */
export function defineJobs<const R extends JobSchemas>(schemas: R): JobRegistry<R> {
  return new JobRegistry(schemas);
}
