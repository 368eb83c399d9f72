import type { StandardSchemaV1 } from '@standard-schema/spec';

// Any Standard Schema validator (https://standardschema.dev: zod 4, valibot, arktype, …) checks a
// payload through its `~standard.validate`; this is the one place lanewake calls it.

export type { StandardSchemaV1 } from '@standard-schema/spec';

/** One refusal: where in the value (keys in order) and why. */
export interface SchemaIssue {
  path: readonly PropertyKey[];
  message: string;
}

export type SchemaCheck<T = unknown> = { ok: true; value: T } | { ok: false; issues: SchemaIssue[] };

/**
 * Checks `value` with `schema`: synchronously when the validator answers
 * synchronously (zod does, unless the schema has async refinements), so the
 * consumer's hot path awaits nothing for it.
 */
export function checkSchema<S extends StandardSchemaV1>(
  schema: S,
  value: unknown,
): SchemaCheck<StandardSchemaV1.InferOutput<S>> | Promise<SchemaCheck<StandardSchemaV1.InferOutput<S>>> {
  const result = schema['~standard'].validate(value);
  return result instanceof Promise ? result.then(toCheck) : toCheck(result);
}

function toCheck<T>(result: StandardSchemaV1.Result<T>): SchemaCheck<T> {
  if (result.issues === undefined) return { ok: true, value: result.value };
  return {
    ok: false,
    issues: result.issues.map((issue) => ({
      path: (issue.path ?? []).map((segment) =>
        typeof segment === 'object' && segment !== null ? segment.key : segment,
      ),
      message: issue.message,
    })),
  };
}

/** `orderId`, `lines[0].sku`: a path as the consumer's error texts spell it (empty for the value itself). */
export function dottedPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const part of path)
    out += typeof part === 'number' ? `[${part}]` : out === '' ? String(part) : `.${String(part)}`;
  return out;
}
