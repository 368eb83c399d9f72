import type { z } from 'zod';

/** One rejected input field: a dotted path such as `items[2].payload`, and why. */
export interface FieldIssue {
  field: string;
  message: string;
}

/**
 * Bad input. Thrown before anything is written; `issues` names every field
 * that was rejected.
 */
export class ValidationError extends Error {
  override readonly name = 'ValidationError';
  readonly issues: readonly FieldIssue[];

  constructor(issues: readonly FieldIssue[], context?: string) {
    const list = issues.map((i) => `${i.field}: ${i.message}`).join('; ');
    super(`${context ? `${context}: ` : ''}invalid ${issues.map((i) => i.field).join(', ')} (${list})`);
    this.issues = issues;
  }

  get fields(): string[] {
    return this.issues.map((i) => i.field);
  }

  static fromZod(error: z.ZodError, context?: string, prefix = ''): ValidationError {
    const issues: FieldIssue[] = [];
    for (const issue of error.issues) {
      if (issue.code === 'unrecognized_keys') {
        // Name each unknown key as its own field, so a typo is pointed at directly.
        for (const key of issue.keys)
          issues.push({ field: fieldPath(prefix, [...issue.path, key]), message: 'is not a known option' });
      } else {
        issues.push({ field: fieldPath(prefix, issue.path), message: issue.message });
      }
    }
    return new ValidationError(issues, context);
  }
}

/** A field's name: `prefix` then the path's keys, `items[2].payload.orderId`; `(input)` for none. */
export function fieldPath(prefix: string, path: readonly PropertyKey[]): string {
  let out = prefix;
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out === '' ? '(input)' : out;
}

/**
 * A result the ledger cannot store (not JSON, or over `resultMaxBytes`), found as a completion inside a
 * transaction (`ctx.transaction`, `ledger.completeInTransaction`): nothing of the transaction commits. A consumer
 * ends the item dead with `failureClass`, as it does a handler's unstorable return value: retrying cannot help.
 */
export class ResultNotStorableError extends ValidationError {
  constructor(
    field: string,
    message: string,
    readonly failureClass: 'invalid_result' | 'result_too_large',
  ) {
    super([{ field, message }], 'handler result is not storable');
  }
}

/** The schema in the database is older than this build; run `migrate`. */
export class SchemaBehindError extends Error {
  override readonly name = 'SchemaBehindError';
  constructor(
    readonly current: number,
    readonly required: number,
  ) {
    super(`ledger schema is at version ${current}, this build needs ${required}: run migrations first`);
  }
}

/** A transaction kept failing with a retryable conflict past the retry budget. */
export class ConflictRetriesExhaustedError extends Error {
  override readonly name = 'ConflictRetriesExhaustedError';
  constructor(
    readonly attempts: number,
    override readonly cause: unknown,
  ) {
    super(`transaction conflicted ${attempts} times in a row; giving up`);
  }
}

/**
 * The database rolled back the caller's whole transaction while the ledger
 * worked inside it (`enqueue(…, { transaction })`): a deadlock (errno 1213)
 * or a lost connection. None of the transaction's writes were kept, and the
 * session is no longer in a transaction, so do not go on with it: run the
 * whole transaction again. `producer.transaction` does that by itself.
 * `cause` is the database's own error.
 */
export class TransactionRolledBackError extends Error {
  override readonly name = 'TransactionRolledBackError';
  /** Running the whole transaction again is the remedy. */
  readonly retryable = true;
  /** The database's error number (1213 for a deadlock), when it gave one. */
  readonly errno: number | undefined;
  constructor(override readonly cause: unknown) {
    const errno =
      typeof cause === 'object' && cause !== null && typeof (cause as { errno?: unknown }).errno === 'number'
        ? (cause as { errno: number }).errno
        : undefined;
    super(
      `the database rolled back the caller's transaction ` +
        `(${cause instanceof Error ? cause.message : String(cause)}); run the whole transaction again`,
    );
    this.errno = errno;
  }
}

/**
 * The database refused the ledger's statements inside the caller's
 * transaction (`enqueue(…, { transaction })`) for a lock conflict it gives up
 * on, again after the ledger's own bounded retries: TiDB's pessimistic lock
 * retry limit (errno 1105), a write conflict (9007), a lock wait timeout
 * (1205). Nothing of the enqueue was written and the transaction is still
 * open, but going on with it only meets the same conflict: roll it back and
 * run the whole transaction again. `producer.transaction` does that by
 * itself. `cause` is the database's own error.
 */
export class TransactionConflictError extends Error {
  override readonly name = 'TransactionConflictError';
  /** Running the whole transaction again is the remedy. */
  readonly retryable = true;
  /** The database's error number, when it gave one. */
  readonly errno: number | undefined;
  constructor(override readonly cause: unknown) {
    const errno =
      typeof cause === 'object' && cause !== null && typeof (cause as { errno?: unknown }).errno === 'number'
        ? (cause as { errno: number }).errno
        : undefined;
    super(
      `a lock conflict kept refusing the enqueue in the caller's transaction ` +
        `(${cause instanceof Error ? cause.message : String(cause)}); roll it ` +
        `back and run the whole transaction again`,
    );
    this.errno = errno;
  }
}

/**
 * The connection was lost while a COMMIT was on its way, and the ledger
 * could not be read afterwards to tell whether it committed. The write may
 * or may not have happened; what the ledger holds is the truth (inspect the
 * item). Lease-fenced writes are safe to repeat: a repeat of one that did
 * commit loses its CAS and writes nothing.
 */
export class CommitOutcomeUnknownError extends Error {
  override readonly name = 'CommitOutcomeUnknownError';
  constructor(override readonly cause: unknown) {
    super(
      `the connection was lost during COMMIT and the ledger could not be read to tell ` +
        `whether it committed (${cause instanceof Error ? cause.message : String(cause)})`,
    );
  }
}

/** The CAS of a transition lost: the caller no longer holds the item. Raised inside a transaction to roll it back. */
export class LeaseLostError extends Error {
  override readonly name: string = 'LeaseLostError';
  constructor(readonly itemId: string) {
    super(`item ${itemId}: lease lost (stale token, expired and reclaimed, or no longer processing)`);
  }
}

/**
 * An idempotency key already stands for a different request: the item it
 * names was enqueued with another queue, type, payload or lane. A repeat of
 * the same request is a duplicate (`duplicate: true`); a different one under
 * the same key is a caller reusing keys by mistake, and dropping it as a
 * duplicate would lose its work without a word. Nothing of the enqueue was
 * written: of a batch (`enqueueMany`), no item.
 */
/** A workflow's idempotency key names a workflow enqueued with a different definition (docs/design/workflows.md). */
export class WorkflowConflictError extends Error {
  override readonly name = 'WorkflowConflictError';
  constructor(
    readonly key: string,
    /** The workflow the key names. */
    readonly workflowId: string,
  ) {
    super(`workflow: key ${JSON.stringify(key)} already names workflow ${workflowId}, of a different definition`);
  }
}

export class IdempotencyConflictError extends Error {
  override readonly name = 'IdempotencyConflictError';
  constructor(
    readonly queue: string,
    readonly idempotencyKey: string,
    /** The item the key names; null when the other request is an earlier item of the same batch (`earlierIndex`). */
    readonly itemId: string | null,
    /** The refused item's place in its batch; undefined for a single enqueue. */
    readonly index?: number,
    /** Within one batch: the earlier item that holds the key. */
    readonly earlierIndex?: number,
  ) {
    const at = index === undefined ? 'enqueue' : `items[${index}]`;
    const holder = itemId !== null ? `item ${itemId}` : `items[${earlierIndex ?? '?'}] of the same batch`;
    super(
      `${at}: idempotency key ${JSON.stringify(idempotencyKey)} of queue ${queue} already ` +
        `names ${holder}, enqueued with a different request (queue, type, payload or lane)`,
    );
  }

  /** The same refusal as a single enqueue's (no batch index). */
  asSingle(): IdempotencyConflictError {
    return new IdempotencyConflictError(this.queue, this.idempotencyKey, this.itemId);
  }
}

/**
 * A write of a lease claimed under an ownership epoch was refused because
 * the queue has been activated for another epoch since (`lanewake activate`):
 * nothing of it committed (docs/design/supervisor.md, Ownership epochs). A
 * LeaseLostError, since this holder may no longer write the item's work; the
 * engine hands the item back without spending an attempt, for the new owner.
 */
export class OwnershipLostError extends LeaseLostError {
  override readonly name = 'OwnershipLostError';
  constructor(
    itemId: string,
    readonly queue: string,
    /** The epoch the lease was claimed under. */
    readonly epoch: number,
    /** The queue's epoch now (0: no ownership row). */
    readonly currentEpoch: number,
  ) {
    super(itemId);
    this.message =
      `item ${itemId}: ownership of queue ${queue} lost (claimed under epoch ${epoch}, ` +
      `the queue is at epoch ${currentEpoch}); nothing of this write committed`;
  }
}

/** An activation's expected epoch did not match the queue's: another deployment activated it first. */
export class OwnershipConflictError extends Error {
  override readonly name = 'OwnershipConflictError';
  constructor(
    readonly queue: string,
    readonly expectedEpoch: number,
    readonly actualEpoch: number,
  ) {
    super(`queue ${queue} is at epoch ${actualEpoch}, not the expected ${expectedEpoch}`);
  }
}

/** What a queue that refuses enqueues is doing (QueueDrainingError.state). */
export type QueueRefusalState = 'drain_only';

/**
 * An enqueue named a queue that takes in nothing new: it is drain-only
 * (`lanewake queue drain`), finishing what it holds before it is deleted.
 * Nothing of the enqueue was written: of a batch, no item.
 */
export class QueueDrainingError extends Error {
  override readonly name = 'QueueDrainingError';
  constructor(
    readonly queue: string,
    readonly state: QueueRefusalState,
    /** The refused item's place in its batch; undefined for a single enqueue. */
    readonly index?: number,
  ) {
    const at = index === undefined ? 'enqueue' : `items[${index}]`;
    super(`${at}: queue ${queue} is drain-only: it takes no new items (state ${state})`);
  }
}

/** Why a queue's delete was refused (QueueDeleteRefusedError.reason). */
export type QueueDeleteRefusal = 'not_drain_only' | 'settling' | 'not_empty';

/**
 * A queue's delete was refused, nothing deleted: it is not drain-only, it
 * became drain-only too recently for every producer to know (`settling`),
 * or it still holds unfinished items (`unfinished` of them, at least).
 */
export class QueueDeleteRefusedError extends Error {
  override readonly name = 'QueueDeleteRefusedError';
  constructor(
    readonly queue: string,
    readonly reason: QueueDeleteRefusal,
    readonly unfinished = 0,
    /** For `settling`: how long (ms) until a delete can go ahead. */
    readonly retryInMs = 0,
  ) {
    super(
      `delete of queue ${queue} refused: ${
        reason === 'not_drain_only'
          ? 'it is not drain-only (lanewake queue drain first)'
          : reason === 'settling'
            ? `it became drain-only less than a moment ago; try again in ${Math.ceil(retryInMs / 1000)} s`
            : `it still holds ${unfinished} unfinished item(s)`
      }`,
    );
  }
}

/** Why a replay was refused (ReplayRejectedError.reason). */
export type ReplayRejection =
  | 'not_found'
  | 'not_replayable_state'
  | 'already_replayed'
  | 'attempt_mismatch'
  | 'error_mismatch';

/**
 * A replay's guard (the item's state, attempt and error digest as the operator saw them) did not
 * hold: nothing was written.
 */
export class ReplayRejectedError extends Error {
  override readonly name = 'ReplayRejectedError';
  constructor(
    readonly itemId: string,
    readonly reason: ReplayRejection,
  ) {
    super(`replay of ${itemId} refused: ${reason.replace(/_/g, ' ')}`);
  }
}

/**
 * Why a repair was refused (RepairRejectedError.reason): as a replay's, and `lane_busy` (its lane's head is running or
 * blocked, so it cannot take its place back now).
 */
export type RepairRejection = ReplayRejection | 'lane_busy';

/**
 * A repair's guard (the item's state, attempt and error digest as the operator saw them) did not hold, or its lane's
 * head is running: nothing was written.
 */
function repairRefusal(reason: RepairRejection): string {
  if (reason === 'not_replayable_state') return 'not dead or cancelled';
  if (reason === 'lane_busy')
    return "its lane's head is running or blocked; try again once it ends (pause the queue to hold the lane)";
  return reason.replace(/_/g, ' ');
}

export class RepairRejectedError extends Error {
  override readonly name = 'RepairRejectedError';
  constructor(
    readonly itemId: string,
    readonly reason: RepairRejection,
  ) {
    super(`repair of ${itemId} refused: ${repairRefusal(reason)}`);
  }
}

/** The admin server could not bind its address (in use, not permitted, not this host's). */
export class AdminAddressError extends Error {
  override readonly name = 'AdminAddressError';
  constructor(
    readonly host: string,
    readonly port: number,
    readonly code: string,
    reason: string,
    override readonly cause: unknown,
  ) {
    super(`the admin server cannot listen on ${host}:${port}: ${reason}`);
  }
}

// Internal signals: thrown and caught inside lanewake, never seen by a caller.

/**
 * A laned completion batch found an entry whose CAS lost: its transaction
 * rolls back, and each entry is completed on its own, which tells exactly who won.
 * @internal
 */
export class PartialBatch extends Error {}

/**
 * The consumer stopped waiting for a handler that ignored its abort: its lease is left to expire.
 * @internal
 */
export class Abandoned extends Error {}
