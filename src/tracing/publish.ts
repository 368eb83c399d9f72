import type { Context, Span } from '@opentelemetry/api';
import { ATTR, errorType, MESSAGING_SYSTEM } from './attributes.js';
import { otel, tracer, type Otel } from './otel.js';
import { encodeTraceparent } from './traceparent.js';

/** What publishing needs of an item about to be inserted (the ledger's NewItem). */
export interface PublishedItem {
  queue: string;
  type: string;
  traceparent: string | null;
}

/** Single enqueues the producer's batcher sends later, together: each with the context its caller was in. */
const singles = new WeakMap<object, Context>();

/**
 * `input` is one single enqueue (producer.enqueue), made in the caller's
 * current context: it may go out in a batch with other callers' enqueues
 * (src/producer/enqueue-batcher.ts), and its span must be its caller's.
 */
export function markSingleEnqueue(input: unknown): void {
  const o = otel();
  if (o !== undefined && typeof input === 'object' && input !== null) singles.set(input, o.context.active());
}

/** The publish spans of one enqueue call: end them with its results, or its error. */
export interface Publishing {
  end(results: readonly { id: string; duplicate: boolean }[]): void;
  fail(error: unknown): void;
}

interface Group {
  span: Span;
  single: boolean;
  indexes: number[];
}

/**
 * Opens the PRODUCER spans `publish <queue>` of an enqueue, before its
 * insert, and sets each item's `traceparent` to its span's context:
 *
 * - a single enqueue made through the producer's batcher: a span of its own,
 *   child of the context its caller was in (`markSingleEnqueue`);
 * - the rest: one span per queue, child of the active context; `single` says
 *   the call was a single-item API (`ledger.enqueue`), which carries the
 *   item's id, while a batch API carries `messaging.batch.message_count`.
 *
 * Every item of a batch span stores that span's context: no per-item
 * "create" spans (a batch of 1,000 would make 1,000 spans).
 */
export function startPublish(
  inputs: readonly object[],
  items: PublishedItem[],
  single: boolean,
): Publishing | undefined {
  const o = otel();
  if (o === undefined || items.length === 0) return undefined;
  const groups: Group[] = [];
  const byQueue = new Map<string, Group>();
  items.forEach((item, i) => {
    const input = inputs[i];
    const caller = input === undefined ? undefined : singles.get(input);
    if (input !== undefined && caller !== undefined) {
      singles.delete(input); // the same object enqueued again later is another call
      groups.push({ span: open(o, item.queue, caller), single: true, indexes: [i] });
      return;
    }
    let g = byQueue.get(item.queue);
    if (g === undefined) {
      g = { span: open(o, item.queue, o.context.active()), single, indexes: [] };
      byQueue.set(item.queue, g);
      groups.push(g);
    }
    g.indexes.push(i);
  });
  for (const g of groups) {
    const traceparent = encodeTraceparent(o, g.span.spanContext());
    for (const i of g.indexes) items[i]!.traceparent = traceparent;
    if (!g.span.isRecording()) continue;
    if (g.single) g.span.setAttribute(ATTR.itemType, items[g.indexes[0]!]!.type);
    else g.span.setAttribute(ATTR.batchCount, g.indexes.length);
  }
  return {
    end: (results) => {
      for (const g of groups) {
        const first = results[g.indexes[0]!];
        if (g.single && first !== undefined && g.span.isRecording()) {
          g.span.setAttribute(ATTR.messageId, first.id);
          // An idempotency key that was there already: the first item, and its traceparent, stay.
          if (first.duplicate) g.span.setAttribute(ATTR.duplicate, true);
        }
        g.span.end();
      }
    },
    fail: (error) => {
      for (const g of groups) {
        g.span.recordException(error instanceof Error ? error : String(error));
        g.span.setAttribute(ATTR.errorType, errorType(error));
        g.span.setStatus({
          code: o.SpanStatusCode.ERROR,
          message: error instanceof Error ? error.message : String(error),
        });
        g.span.end();
      }
    },
  };
}

function open(o: Otel, queue: string, parent: Context): Span {
  return tracer(o).startSpan(
    `publish ${queue}`,
    {
      kind: o.SpanKind.PRODUCER,
      attributes: {
        [ATTR.system]: MESSAGING_SYSTEM,
        [ATTR.systemName]: MESSAGING_SYSTEM,
        [ATTR.operationName]: 'publish',
        [ATTR.operationType]: 'send',
        [ATTR.destination]: queue,
      },
    },
    parent,
  );
}
