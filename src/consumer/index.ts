export { Consumer, type ConsumerOptions, type ConsumerCounters, type ConsumerEvents } from './consumer.js';
export { consumerSettingsSchema, type ConsumerSettings, type ConsumerSettingsInput } from './options.js';
export { PermanentError, DeferError, RateLimitedError, BlockOnError, JobAbortedError, Defer, BlockOn, type AbortReason } from './errors.js';
export { defineHandler, type Handler, type HandlerDefinition, type HandlerEntry, type Job, type JobContext, type RegisteredHandler } from './types.js';
export type { Outcome } from './executor.js';
