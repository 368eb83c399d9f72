import type { QueueClass } from '../ledger/types.js';

/**
 * Key names. `{queue}` is a Redis Cluster hash tag: every key of one queue
 * lives in one slot, so multi-stream reads of a queue work on a cluster.
 */
export function wakeStreamKey(prefix: string, queue: string, queueClass: QueueClass): string {
  return `${prefix}{${queue}}:wake:${queueClass}`;
}

export function controlStreamKey(prefix: string, queue: string): string {
  return `${prefix}{${queue}}:control`;
}

/** The queue's standing offers of consumers with free slots (src/wake/offers.ts). */
export function offersKey(prefix: string, queue: string): string {
  return `${prefix}{${queue}}:offers`;
}

/**
 * The prefix's doorbell (src/wake/doorbell.ts): one key, so one slot on a cluster. No hash tag: a queue's keys
 * all carry one, so no queue's key can be this one.
 */
export function doorbellKey(prefix: string): string {
  return `${prefix}doorbell`;
}

/** Consumers of one queue form this one group on each of its wake streams. */
export const CONSUMER_GROUP = 'consumers';

export const DEFAULT_KEY_PREFIX = 'lw:';
