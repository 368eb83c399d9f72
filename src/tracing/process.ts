import type { Attributes, Histogram, Span } from '@opentelemetry/api';
import { ATTR, DURATION_BUCKETS, errorType, MESSAGING_SYSTEM, PROCESS_DURATION } from './attributes.js';
import { meter, otel, tracer, type Otel } from './otel.js';
import { contextFrom, decodeTraceparent } from './traceparent.js';

/** What a process span needs of the item an attempt runs (the consumer's ClaimedItem). */
export interface ProcessedItem {
  id: string;
  queue: string;
  type: string;
  attempt: number;
  traceparent: string | null;
  /**
   * A coalesced group's later members (docs/design/batches-and-steps.md, Coalescing): the attempt processes them too.
   */
  group?: { ids: readonly string[] } | undefined;
}

/** One attempt, as the tracing sees it: its item, and what its handler threw (read once it has ended). */
export interface TracedAttempt {
  readonly item: ProcessedItem;
  readonly thrown: unknown;
}

/** Outcomes that are an attempt's failure: the span's status is ERROR. */
const FAILED = new Set(['retried', 'dead', 'leaseLost', 'abandoned']);

/** Whether OpenTelemetry is loaded: the consumer's one check per attempt when it is not. */
export function tracing(): boolean {
  return otel() !== undefined;
}

/**
 * Runs one attempt in a CONSUMER span `process <queue>` and records its
 * duration in the `messaging.process.duration` histogram. The span links to
 * the item's creation context (its publish span, stored as the item's
 * traceparent) and has it as parent: an attempt processes one item, the
 * conventions' single-message case, so every attempt of an item appears under
 * the enqueue that made it. An item without one starts a trace of its own:
 * never a child of whatever context the consumer happened to be in. The
 * handler runs in the span's context, so spans it starts are its children.
 */
export function traceAttempt<O extends string>(run: TracedAttempt, attempt: () => Promise<O>): Promise<O> {
  const o = otel();
  if (o === undefined) return attempt();
  const { item } = run;
  const creation = decodeTraceparent(o, item.traceparent);
  const parent = contextFrom(o, creation);
  const attributes: Attributes = {
    [ATTR.system]: MESSAGING_SYSTEM,
    [ATTR.systemName]: MESSAGING_SYSTEM,
    [ATTR.operationName]: 'process',
    [ATTR.operationType]: 'process',
    [ATTR.destination]: item.queue,
    [ATTR.messageId]: item.id,
    [ATTR.itemType]: item.type,
    [ATTR.attempt]: item.attempt,
  };
  if (item.group !== undefined) attributes[ATTR.batchCount] = item.group.ids.length + 1;
  const span = tracer(o).startSpan(
    `process ${item.queue}`,
    { kind: o.SpanKind.CONSUMER, attributes, links: creation === undefined ? [] : [{ context: creation }] },
    parent,
  );
  const startedMs = performance.now();
  return o.context.with(o.trace.setSpan(parent, span), attempt).then(
    (outcome) => {
      finish(o, span, item.queue, outcome, run.thrown, startedMs);
      return outcome;
    },
    (error: unknown) => {
      finish(o, span, item.queue, 'error', error, startedMs);
      throw error;
    },
  );
}

function finish(o: Otel, span: Span, queue: string, outcome: string, thrown: unknown, startedMs: number): void {
  const failed = outcome === 'error' || FAILED.has(outcome);
  const type = failed ? (thrown !== undefined ? errorType(thrown) : outcome) : undefined;
  span.setAttribute(ATTR.outcome, outcome);
  if (failed) {
    if (thrown !== undefined) span.recordException(thrown instanceof Error ? thrown : String(thrown));
    span.setAttribute(ATTR.errorType, type ?? outcome);
    span.setStatus({ code: o.SpanStatusCode.ERROR, message: thrown instanceof Error ? thrown.message : outcome });
  }
  span.end();
  const attributes: Attributes = {
    [ATTR.system]: MESSAGING_SYSTEM,
    [ATTR.operationName]: 'process',
    [ATTR.destination]: queue,
    [ATTR.outcome]: outcome,
  };
  if (type !== undefined) attributes[ATTR.errorType] = type;
  processDuration(o).record((performance.now() - startedMs) / 1000, attributes);
}

let histogram: Histogram | undefined;

function processDuration(o: Otel): Histogram {
  const m = meter(o);
  if (m.fresh || histogram === undefined) {
    histogram = m.meter.createHistogram(PROCESS_DURATION, {
      description:
        'Duration of processing operation: one attempt of a lanewake item, from its start to its outcome written.',
      unit: 's',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
  }
  return histogram;
}
