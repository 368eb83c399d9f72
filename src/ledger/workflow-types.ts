import type { EnqueueInput } from './inputs.js';
import type { ItemState } from './types.js';

/**
 * What a job's dependents do when it ends dead or cancelled (docs/design/workflows.md): `cancel` them (and theirs,
 * cascading), or let them `run` and see the failure in `dependencies()`.
 */
export type FailurePolicy = 'cancel' | 'run';
export const FAILURE_POLICIES = ['cancel', 'run'] as const;

/** The most jobs one workflow may have. */
export const MAX_WORKFLOW_JOBS = 100_000;

/**
 * One job of a workflow: an item as `enqueue` takes it, without a lane, concurrency key or idempotency key (a
 * workflow has its own key; lanes and keys inside a workflow are refused for now), its queue defaulting to the
 * workflow's, plus the names of the jobs it runs after.
 */
export interface WorkflowJobInput extends Omit<EnqueueInput, 'queue' | 'lane' | 'concurrencyKey' | 'idempotencyKey'> {
  queue?: string;
  /** Names of jobs of the same workflow that must settle first. */
  after?: readonly string[];
  /** Overrides the workflow's failure policy for this job's dependencies. */
  onFailure?: FailurePolicy;
}

export interface WorkflowInput {
  /** Idempotency key, unique in the ledger: the same definition again returns the first workflow. */
  key?: string;
  /** A label for operators. Default 'workflow'. */
  name?: string;
  /** The queue of jobs that name none. */
  queue?: string;
  /** Default 'cancel'. */
  onFailure?: FailurePolicy;
  /** The jobs by name (1 to 128 characters of letters, digits, `_ - . :`). */
  jobs: Readonly<Record<string, WorkflowJobInput>>;
}

export interface WorkflowResult {
  id: string;
  /** True when the key named a workflow enqueued before: nothing was written. */
  duplicate: boolean;
  /** Each job's item id, by name. */
  jobs: Record<string, string>;
}

/** One dependency of a job, as `job.dependencies()` shows it. */
export interface DependencyView {
  name: string;
  id: string;
  type: string;
  state: ItemState;
  /** Its result (completed) or skip reason (skipped); null otherwise. */
  result: unknown;
  error: string | null;
  failureClass: string | null;
}

export interface DependencyPage {
  dependencies: DependencyView[];
  /** Pass as `after` for the next page; null on the last. */
  next: string | null;
}

/** A job's state as a workflow shows it: `waiting` is a pending job whose dependencies have not all settled. */
export type WorkflowJobState = ItemState | 'waiting';

export interface WorkflowView {
  id: string;
  key: string | null;
  name: string;
  state: 'running' | 'cancelled';
  onFailure: FailurePolicy;
  /** The item whose handler added it (ctx.workflow), or null. */
  parentItem: string | null;
  createdAt: Date;
  jobs: {
    name: string;
    id: string;
    queue: string;
    type: string;
    state: WorkflowJobState;
    after: string[];
    depsPending: number;
    depsFailed: number;
    onFailure: FailurePolicy;
  }[];
}
