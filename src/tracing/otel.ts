import type * as OtelApi from '@opentelemetry/api';
import { packageVersion } from '../version.js';

// @opentelemetry/api is an optional peer dependency: loaded once, on first
// use, by a dynamic import that may fail. Until it has loaded, and for good
// when it is absent, `otel()` is undefined and every tracing call is one
// property check (docs/operations/observing.md, Tracing).

export type Otel = typeof OtelApi;

/** The instrumentation scope's name: the tracer and meter lanewake asks for. */
export const SCOPE = 'lanewake';

let api: Otel | null | undefined;
let loading: Promise<Otel | undefined> | undefined;

/** The loaded API, or undefined (not loaded yet, or not installed). */
export function otel(): Otel | undefined {
  return api ?? undefined;
}

/** Whether the import has been tried: after this, `otel()` is final. */
export function otelSettled(): boolean {
  return api !== undefined;
}

/** Loads the API once; resolves undefined when the package is not installed. Never rejects. */
export function loadOtel(): Promise<Otel | undefined> {
  loading ??= import('@opentelemetry/api').then(
    (m) => {
      api = m;
      return m;
    },
    () => {
      api = null;
      return undefined;
    },
  );
  return loading;
}

/** For tests and benchmarks: act as if the package were absent (`null`), or use `value`. @internal */
export function setOtelForTesting(value: Otel | null): void {
  api = value;
  loading = Promise.resolve(value ?? undefined);
}

let scopeVersion: string | undefined;
function version(): string {
  scopeVersion ??= packageVersion();
  return scopeVersion;
}

/** The tracer, asked of the global provider again whenever a new one is registered. */
let tracerOf: { provider: OtelApi.TracerProvider; tracer: OtelApi.Tracer } | undefined;

export function tracer(o: Otel): OtelApi.Tracer {
  const provider = o.trace.getTracerProvider();
  if (tracerOf?.provider !== provider) tracerOf = { provider, tracer: provider.getTracer(SCOPE, version()) };
  return tracerOf.tracer;
}

/**
 * The global meter provider has no proxy (unlike the tracer's): a meter asked
 * for before the application registers its provider would be a no-op for
 * good, so the meter is asked for again whenever the provider changes.
 */
let meterOf: { provider: OtelApi.MeterProvider; meter: OtelApi.Meter } | undefined;

export function meter(o: Otel): { meter: OtelApi.Meter; fresh: boolean } {
  const provider = o.metrics.getMeterProvider();
  if (meterOf?.provider === provider) return { meter: meterOf.meter, fresh: false };
  meterOf = { provider, meter: provider.getMeter(SCOPE, version()) };
  return { meter: meterOf.meter, fresh: true };
}
