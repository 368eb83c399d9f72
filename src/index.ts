export * from './ledger/index.js';
export * from './wake/index.js';
export * from './producer/index.js';
export * from './consumer/index.js';
export {
  ValidationError,
  SchemaBehindError,
  ConflictRetriesExhaustedError,
  TransactionRolledBackError,
  CommitOutcomeUnknownError,
  type FieldIssue,
} from './errors.js';
export { createLogger, setDefaultLogLevel, setLogDestination, type Logger } from './log.js';
