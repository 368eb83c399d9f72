export * from './ledger/index.js';
export * from './wake/index.js';
export * from './producer/index.js';
export * from './consumer/index.js';
export { ValidationError, SchemaBehindError, ConflictRetriesExhaustedError, type FieldIssue } from './errors.js';
export { createLogger, type Logger } from './log.js';
