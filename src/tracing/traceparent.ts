import type { Context, SpanContext } from '@opentelemetry/api';
import type { Otel } from './otel.js';

// An item's creation context travels in lw_items.traceparent as a W3C
// `traceparent` (version 00: 55 chars). Written from the span context here,
// not through the global propagator: an application that registers only a
// tracer provider has a no-op propagator, and one that uses another format
// (B3, Jaeger) would write something that is not a traceparent. Trace state
// and baggage are not carried.

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The traceparent of a valid span context, else null. */
export function encodeTraceparent(o: Otel, sc: SpanContext): string | null {
  if (!o.isSpanContextValid(sc)) return null;
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** A stored traceparent as a remote span context; undefined when absent or malformed. */
export function decodeTraceparent(o: Otel, text: string | null): SpanContext | undefined {
  if (text === null) return undefined;
  const m = TRACEPARENT.exec(text);
  if (!m) return undefined;
  const sc: SpanContext = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16), isRemote: true };
  return o.isSpanContextValid(sc) ? sc : undefined;
}

/** A context whose parent is the stored span context (ROOT when there is none). */
export function contextFrom(o: Otel, sc: SpanContext | undefined): Context {
  return sc === undefined ? o.ROOT_CONTEXT : o.trace.setSpanContext(o.ROOT_CONTEXT, sc);
}
