import { CommanderError } from 'commander';
import { OwnershipConflictError, ValidationError } from '../errors.js';

/** Exit codes of the `lanewake` command (also listed in `lanewake --help`). */
export const EXIT = {
  ok: 0,
  /** Runtime failure: ledger unreachable, item not found, replay refused. */
  failure: 1,
  /** Bad usage or bad input. */
  usage: 2,
  /** Ownership lost: the queue's epoch is not the one expected. */
  ownership: 3,
  /** Stopped by SIGINT or SIGTERM before it was done (the demo). */
  interrupted: 130,
} as const;

/** A failure the CLI reports with its own message and exit code. */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    message: string,
    readonly exitCode: number = EXIT.failure,
  ) {
    super(message);
  }
}

/** Bad input on the command line (exit 2); the message names the option or argument. */
export class UsageError extends CliError {
  constructor(message: string) {
    super(message, EXIT.usage);
  }
}

/**
 * Re-labels a ValidationError's fields with the option names the operator
 * typed (`maxAttempts` → `--max-attempts`), so the message points at the flag.
 */
export function renameFields(
  error: ValidationError,
  names: Readonly<Record<string, string>>,
  context: string,
): ValidationError {
  return new ValidationError(
    error.issues.map((i) => ({ field: names[i.field] ?? i.field, message: i.message })),
    context,
  );
}

/** Runs `fn`, re-labelling any ValidationError it throws with `names`. */
export async function withFieldNames<T>(
  names: Readonly<Record<string, string>>,
  context: string,
  fn: () => Promise<T>,
): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    if (error instanceof ValidationError) throw renameFields(error, names, context);
    throw error;
  }
}

export function exitCodeOf(error: unknown): number {
  if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
  if (error instanceof CliError) return error.exitCode;
  if (error instanceof ValidationError) return EXIT.usage;
  if (error instanceof OwnershipConflictError) return EXIT.ownership;
  return EXIT.failure;
}

/** One readable line for an error, never a stack (connection errors can carry an empty message). */
export function describeError(error: unknown): string {
  if (error instanceof Error) {
    if (error.message !== '') return error.message;
    const inner = (error as Error & { errors?: unknown }).errors;
    if (Array.isArray(inner) && inner[0] instanceof Error && inner[0].message !== '') return inner[0].message;
    const code = (error as Error & { code?: unknown }).code;
    return typeof code === 'string' ? code : error.name;
  }
  return String(error);
}
