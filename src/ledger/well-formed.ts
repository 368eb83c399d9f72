/**
 * `String.prototype.isWellFormed` (Node 20; its type is in lib ES2024, newer
 * than this build's lib): false when the string holds a lone surrogate.
 */
export function isWellFormedText(text: string): boolean {
  return (text as unknown as { isWellFormed(): boolean }).isWellFormed();
}

/** Why a string with a lone surrogate is refused. */
export const NOT_WELL_FORMED =
  'must be well-formed UTF-16: it holds a lone surrogate (half of a character such as an ' +
  'emoji, as .slice() can leave it), which the ledger could only store as U+FFFD';
