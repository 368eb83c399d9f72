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
        for (const key of issue.keys) issues.push({ field: formatPath(prefix, [...issue.path, key]), message: 'is not a known option' });
      } else {
        issues.push({ field: formatPath(prefix, issue.path), message: issue.message });
      }
    }
    return new ValidationError(issues, context);
  }
}

function formatPath(prefix: string, path: readonly PropertyKey[]): string {
  let out = prefix;
  for (const part of path) {
    if (typeof part === 'number') out += `[${part}]`;
    else out += out === '' ? String(part) : `.${String(part)}`;
  }
  return out === '' ? '(input)' : out;
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
