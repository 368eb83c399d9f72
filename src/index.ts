// The public surface of lanewake, by name. Anything not listed here is internal.

// Ledger: the durable state.
export { Ledger, DEFAULT_MAX_ATTEMPTS } from './ledger/ledger.js';
export type {
  EnqueueInput,
  EnqueueOptions,
  ClaimCandidate,
  ClaimInput,
  FinalizeResult,
  RetryInput,
} from './ledger/ledger.js';
export { ledgerConfigSchema, parseLedgerConfig, type LedgerConfig, type LedgerConfigInput } from './ledger/config.js';
export type { LedgerDb, Executor } from './ledger/connection.js';
export {
  migrate,
  schemaStatus,
  assertSchemaCurrent,
  SCHEMA_VERSION,
  type MigrateResult,
  type SchemaStatus,
} from './ledger/migrations.js';
export { backoffDelayMs, DEFAULT_BACKOFF, type BackoffPolicy, type BackoffInput } from './ledger/backoff.js';
export { errorDigest } from './ledger/ids.js';
export {
  ITEM_STATES,
  TERMINAL_STATES,
  QUEUE_CLASSES,
  type ItemState,
  type QueueClass,
  type JsonValue,
  type WorkItem,
  type ClaimedItem,
  type AttemptRecord,
  type EnqueueResult,
  type RepairResult,
  type LeaseHandle,
  type EpochFence,
  type RenewOutcome,
  type ClaimOutcome,
  type SuccessorClaim,
  type CancelOutcome,
  type QueueStats,
  type BoundedCount,
  type Ownership,
  type LiveConsumer,
  type ConcurrencyLimits,
  type KeyScope,
  type QueueSettings,
} from './ledger/types.js';
export type { QueueRow } from './ledger/sql/queues/drain.js';
export type { ReclaimOutcome, WokenItem, ProbeOutcome } from './ledger/upkeep-types.js';
export {
  FAILURE_POLICIES,
  MAX_WORKFLOW_JOBS,
  type FailurePolicy,
  type WorkflowInput,
  type WorkflowJobInput,
  type WorkflowResult,
  type WorkflowView,
  type WorkflowJobState,
  type DependencyView,
  type DependencyPage,
} from './ledger/workflow-types.js';
export { LedgerWorkflows } from './ledger/workflows.js';
export {
  type Explanation,
  type WhyCode,
  WHY_CODES,
  type ItemSummary,
  type ItemFilter,
  type ItemPage,
  type LaneSummary,
  type DeadGroup,
  type SeriesPoint,
  type QueueSeries,
  type DeadFilter,
  type PurgeFilter,
} from './ledger/operator-types.js';
export type { LedgerOperator, QueueView, ReplayedItem } from './ledger/operator.js';
export { exactCount, sumCounts, countLess, unfinishedCount, formatCount } from './ledger/bounded-count.js';

// Wake-ups (Redis Streams).
export { WakeChannel, type WakeChannelOptions, type PublishCounters } from './wake/wake-channel.js';
export type { WakeMessage, WakeKind, ControlMessage } from './wake/messages.js';
export type { WakeTimer } from './wake/timers.js';
export type { RecurringSchedule, ScheduleItem, ScheduleSource, ScheduleView } from './ledger/schedule-types.js';
export { LedgerSchedules } from './ledger/schedules.js';
export { ScheduleFirer, type ScheduleFirerOptions, type ScheduleFirerCounters } from './schedules/firer.js';
export { wakeStreamKey, controlStreamKey, DEFAULT_KEY_PREFIX } from './wake/keys.js';
export type { ClusterSeed, ClusterTarget, RedisTarget } from './wake/redis.js';

// Producing work.
export { Producer, type ProducerOptions, type ProducerTransaction, type AfterCommit } from './producer/producer.js';

// Consuming work.
export { Consumer, type ConsumerOptions, type ConsumerCounters, type ConsumerEvents } from './consumer/consumer.js';
export { consumerSettingsSchema, type ConsumerSettings, type ConsumerSettingsInput } from './consumer/options.js';
export {
  poolConsumers,
  planPools,
  POOL_PROFILES,
  CLASS_PREFERENCES,
  type PoolsInput,
  type PoolSpec,
  type PoolPlan,
  type PoolProfile,
  type ClassPreference,
} from './consumer/pools.js';
export {
  PermanentError,
  DeferError,
  RateLimitedError,
  BlockOnError,
  SkipError,
  JobAbortedError,
  Defer,
  BlockOn,
  type AbortReason,
} from './consumer/errors.js';
export {
  defineHandler,
  type Handler,
  type HandlerDefinition,
  type CoalescingHandlerDefinition,
  type HandlerEntry,
  type Job,
  type CoalescedJob,
  type CoalescedView,
  type JobContext,
  type RegisteredHandler,
  type BatchContext,
  type BatchHandler,
  type BatchItemOutcome,
  type BatchOptions,
  type BatchOutcomes,
} from './consumer/types.js';
export { defineBatchHandler, type BatchHandlerDefinition } from './consumer/batches.js';
export type { CoalesceMode, StepRecord } from './ledger/types.js';
export type { Outcome } from './consumer/job-run.js';

// Typed jobs: one registry of queues, types and payload schemas for producers and handlers.
export { defineJobs, JobRegistry } from './jobs/registry.js';
export type {
  JobSchemas,
  QueueName,
  TypeName,
  PayloadInput,
  PayloadOutput,
  TypedEnqueueInput,
  TypedEnqueueOptions,
} from './jobs/types.js';
export { TypedProducer, type TypedProducerTransaction } from './jobs/typed-producer.js';
export type { TypedHandler, TypedHandlerEntry, TypedHandlers } from './jobs/typed-handlers.js';
export type { StandardSchemaV1 } from './jobs/standard-schema.js';

// Errors.
export {
  ValidationError,
  ResultNotStorableError,
  SchemaBehindError,
  ConflictRetriesExhaustedError,
  TransactionRolledBackError,
  TransactionConflictError,
  CommitOutcomeUnknownError,
  LeaseLostError,
  OwnershipLostError,
  OwnershipConflictError,
  IdempotencyConflictError,
  WorkflowConflictError,
  QueueDrainingError,
  QueueDeleteRefusedError,
  ReplayRejectedError,
  RepairRejectedError,
  AdminAddressError,
  type ReplayRejection,
  type QueueRefusalState,
  type QueueDeleteRefusal,
  type RepairRejection,
  type FieldIssue,
} from './errors.js';

// Diagnostics channels (node:diagnostics_channel).
export { DIAGNOSTICS, type ReconcilePassMessage, type ClaimRoundMessage, type WakeReadMessage } from './diagnostics.js';

// Logging.
export { createLogger, setDefaultLogLevel, setLogDestination, type Logger } from './log.js';
