import { InvalidArgumentError } from 'commander';
import { UsageError } from './errors.js';

/**
 * Option parsers. The ones used as commander argParsers throw
 * InvalidArgumentError, which commander reports naming the option
 * (`option '--max-attempts <n>' argument 'x' is invalid. …`), exit 2.
 */

/** A whole number (range checks are the ledger's, which names the field). */
export function parseInteger(value: string): number {
  const n = Number(value);
  if (!/^[+-]?\d+$/.test(value.trim()) || !Number.isSafeInteger(n))
    throw new InvalidArgumentError('must be a whole number');
  return n;
}

const ISO_DATE_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2}))?$/i;

/**
 * An ISO 8601 instant: a date-time with a zone (`2026-12-01T09:00:00Z`,
 * `…+01:00`), or a bare date meaning midnight UTC. A time without a zone is
 * refused: it would silently mean this machine's local time.
 */
export function parseInstant(value: string): Date {
  const v = value.trim();
  const d = ISO_DATE_TIME.test(v) ? new Date(v) : undefined;
  if (d === undefined || Number.isNaN(d.getTime())) {
    throw new InvalidArgumentError(
      'must be an ISO 8601 date-time with a zone, e.g. 2026-12-01T09:00:00Z (or a date, meaning midnight UTC)',
    );
  }
  return d;
}

/**
 * The JSON text of an option such as `--payload`. Not a commander argParser:
 * commander would echo the rejected text, and a payload is never printed.
 * The message gives only the position of the fault.
 */
export function parseJsonOption(option: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    const at = /position (\d+)/.exec(error instanceof Error ? error.message : '');
    throw new UsageError(`option '${option}' is not valid JSON${at ? ` (fault at position ${at[1]})` : ''}`);
  }
}

/** A hex digest as typed; the ledger checks its shape. */
export function parseDigest(value: string): string {
  return value.trim().toLowerCase();
}

/** Help line for commands that take an item id (ids are base64url, so some begin with '-'). */
export const ID_HELP =
  "An id that begins with '-' is read as the id all the same (or put `--` before it, after the options).";
