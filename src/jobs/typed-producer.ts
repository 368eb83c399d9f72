import type { Kysely, Transaction } from 'kysely';
import type { Executor } from '../ledger/connection.js';
import type { EnqueueResult } from '../ledger/types.js';
import type { AfterCommit, Producer } from '../producer/producer.js';
import type {
  JobChecks,
  JobSchemas,
  PayloadInput,
  QueueName,
  TypeName,
  TypedEnqueueInput,
  TypedEnqueueOptions,
} from './types.js';

/** The typed enqueues inside a caller's transaction (`TypedProducer.transaction`). */
export interface TypedProducerTransaction<R extends JobSchemas, DB> {
  /** The caller's transaction, for its own writes. */
  trx: Transaction<DB>;
  enqueue<Q extends QueueName<R>, T extends TypeName<R, Q>>(
    queue: Q,
    type: T,
    payload: PayloadInput<R, Q, T>,
    options?: TypedEnqueueOptions,
  ): Promise<EnqueueResult>;
  enqueueMany(items: readonly TypedEnqueueInput<R>[]): Promise<EnqueueResult[]>;
}

/**
 * A Producer's enqueues typed by a job registry (`jobs.producer(producer)`):
 * each payload is checked against its schema before anything is written,
 * then the Producer enqueues it as given. A refused payload is a
 * ValidationError naming its fields (`payload.orderId`,
 * `items[2].payload.orderId`); a batch with one refused item writes nothing.
 */
export class TypedProducer<R extends JobSchemas> {
  constructor(
    readonly jobs: JobChecks<R>,
    /** The untyped producer, for what is not an enqueue (cancel, pause, wakeDependency, schedules, …). */
    readonly producer: Producer,
  ) {}

  async enqueue<Q extends QueueName<R>, T extends TypeName<R, Q>>(
    queue: Q,
    type: T,
    payload: PayloadInput<R, Q, T>,
    options: TypedEnqueueOptions = {},
  ): Promise<EnqueueResult> {
    return this.producer.enqueue(await this.jobs.input(queue, type, payload, options));
  }

  async enqueueMany(items: readonly TypedEnqueueInput<R>[]): Promise<EnqueueResult[]> {
    await this.jobs.check(items, true);
    return this.producer.enqueueMany(items);
  }

  /**
   * `producer.transaction` with typed enqueues: they commit with the
   * caller's own writes in `tx.trx`, and wake-ups go out after the commit.
   * A refused payload throws before it is written, rolling the transaction back.
   */
  transaction<DB, T>(db: Kysely<DB>, fn: (tx: TypedProducerTransaction<R, DB>) => Promise<T>): Promise<T> {
    return this.producer.transaction(db, (tx) =>
      fn({
        trx: tx.trx,
        enqueue: async (queue, type, payload, options = {}) =>
          tx.enqueue(await this.jobs.input(queue, type, payload, options)),
        enqueueMany: async (items) => {
          await this.jobs.check(items, true);
          return tx.enqueueMany(items);
        },
      }),
    );
  }

  /** `producer.enqueueWithin` typed: enqueues inside the caller's `trx`; call `publish()` after it commits. */
  async enqueueWithin(trx: Executor, items: readonly TypedEnqueueInput<R>[]): Promise<AfterCommit> {
    await this.jobs.check(items, true);
    return this.producer.enqueueWithin(trx, items);
  }
}
