export * from './ledger/index.js';
export { ValidationError, SchemaBehindError, ConflictRetriesExhaustedError, type FieldIssue } from './errors.js';
