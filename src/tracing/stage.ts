import { ATTR, errorType } from './attributes.js';
import { otel, tracer } from './otel.js';

/**
 * Runs one named stage of an attempt (ctx.stage) in an INTERNAL span
 * `stage <name>`, a child of the active context: inside a handler that is the
 * attempt's process span (src/tracing/process.ts). Without OpenTelemetry, `fn` runs as is.
 */
export function traceStage<T>(name: string, item: { id: string; type: string }, fn: () => Promise<T>): Promise<T> {
  const o = otel();
  if (o === undefined) return fn();
  return tracer(o).startActiveSpan(
    `stage ${name}`,
    {
      kind: o.SpanKind.INTERNAL,
      attributes: { [ATTR.stage]: name, [ATTR.messageId]: item.id, [ATTR.itemType]: item.type },
    },
    (span) =>
      fn().then(
        (value) => {
          span.end();
          return value;
        },
        (error: unknown) => {
          span.recordException(error instanceof Error ? error : String(error));
          span.setAttribute(ATTR.errorType, errorType(error));
          span.setStatus({
            code: o.SpanStatusCode.ERROR,
            message: error instanceof Error ? error.message : String(error),
          });
          span.end();
          throw error;
        },
      ),
  );
}
