import { sql } from 'kysely';
import type { LedgerDb } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import type { LiveConsumer, QueueClass } from '../types.js';
import { nowPlusMsText } from './common.js';

/** A consumer is live while its last heartbeat is younger than this: three missed beats. */
export const CONSUMER_LIVE_MS = 15_000;
/** Rows of consumers gone this long (killed, never deregistered) are deleted by the next registration. */
const FORGET_AFTER_MS = 24 * 3_600_000;

export interface ConsumerRow {
  name: string;
  queue: string;
  classes: readonly QueueClass[];
  types: readonly string[] | null;
  concurrency: number;
  maxProcessing: number | null;
  epoch: number | null;
  version: string;
}

/** A consumer's heartbeat: its row written (or rewritten) with last_seen now; started_at kept from its first beat. */
export async function beat(db: LedgerDb, t: LedgerTables, c: ConsumerRow, first: boolean): Promise<void> {
  const types = c.types === null ? null : c.types.join(',');
  await sql`INSERT INTO ${t.consumers} (name, queue, classes, types, concurrency, max_processing, epoch, version, started_at, last_seen)
    VALUES (${c.name}, ${c.queue}, ${c.classes.join(',')}, ${types}, ${c.concurrency}, ${c.maxProcessing}, ${c.epoch}, ${c.version}, NOW(6), NOW(6))
    ON DUPLICATE KEY UPDATE last_seen = NOW(6), queue = ${c.queue}, classes = ${c.classes.join(',')}, types = ${types},
      concurrency = ${c.concurrency}, max_processing = ${c.maxProcessing}, epoch = ${c.epoch}`.execute(db);
  if (first) await sql`DELETE FROM ${t.consumers} WHERE last_seen < ${sql.raw(nowPlusMsText(-FORGET_AFTER_MS))} LIMIT 100`.execute(db);
}

/** A consumer stopped: its row goes. */
export async function forget(db: LedgerDb, t: LedgerTables, name: string): Promise<void> {
  await sql`DELETE FROM ${t.consumers} WHERE name = ${name}`.execute(db);
}

interface Row {
  name: string;
  queue: string;
  classes: string;
  types: string | null;
  concurrency: number;
  max_processing: number | null;
  epoch: number | string | null;
  version: string;
  started_at: Date;
  last_seen: Date;
}

/** The consumers whose last heartbeat is younger than CONSUMER_LIVE_MS, of one queue or all, by queue and name. */
export async function liveConsumers(db: LedgerDb, t: LedgerTables, queue?: string): Promise<LiveConsumer[]> {
  const ofQueue = queue === undefined ? sql`` : sql`queue = ${queue} AND`;
  const r = await sql<Row>`SELECT name, queue, classes, types, concurrency, max_processing, epoch, version, started_at, last_seen
    FROM ${t.consumers} WHERE ${ofQueue} last_seen >= ${sql.raw(nowPlusMsText(-CONSUMER_LIVE_MS))} ORDER BY queue, name`.execute(db);
  return r.rows.map((x) => ({
    name: x.name,
    queue: x.queue,
    classes: x.classes.split(',').filter((c) => c !== '') as QueueClass[],
    types: x.types === null ? null : x.types.split(','),
    concurrency: Number(x.concurrency),
    maxProcessing: x.max_processing === null ? null : Number(x.max_processing),
    epoch: x.epoch === null ? null : Number(x.epoch),
    version: x.version,
    startedAt: x.started_at,
    lastSeen: x.last_seen,
  }));
}
