// The attribute names lanewake's spans and its histogram carry: the
// OpenTelemetry messaging semantic conventions (docs/operations/observing.md, Tracing),
// plus a few of lanewake's own under `lanewake.`.

export const MESSAGING_SYSTEM = 'lanewake';

export const ATTR = {
  /** `messaging.system` was renamed `messaging.system.name` in the conventions (1.28+): both are set. */
  system: 'messaging.system',
  systemName: 'messaging.system.name',
  operationName: 'messaging.operation.name',
  operationType: 'messaging.operation.type',
  destination: 'messaging.destination.name',
  messageId: 'messaging.message.id',
  batchCount: 'messaging.batch.message_count',
  errorType: 'error.type',
  itemType: 'lanewake.item.type',
  attempt: 'lanewake.attempt',
  outcome: 'lanewake.outcome',
  duplicate: 'lanewake.duplicate',
  /** A handler's named stage (ctx.stage). */
  stage: 'lanewake.stage',
} as const;

/** The histogram of process durations (seconds), as the conventions name it. */
export const PROCESS_DURATION = 'messaging.process.duration';

/** The conventions' advised buckets for messaging durations, in seconds. */
export const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

/** A low-cardinality name for what was thrown: its class's name. */
export function errorType(error: unknown): string {
  if (error instanceof Error) return error.name !== 'Error' ? error.name : error.constructor.name;
  return typeof error;
}
