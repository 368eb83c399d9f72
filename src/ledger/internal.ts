/**
 * The few statement helpers that tests and benchmarks reach into. Not part of
 * the public surface (src/index.ts does not export them): outside src/ledger,
 * import them from here, never from src/ledger/sql/.
 */
export { CLAIMED_COLUMN_LIST } from './sql/claim/claimed.js';
export { jsonLiteral, NO_TIME_TEXT, truncate } from './sql/common/fragments.js';
export { pipelined } from './sql/common/pipeline.js';
