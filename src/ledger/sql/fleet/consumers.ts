import { sql, type RawBuilder } from 'kysely';
import type { LedgerDb } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { LiveConsumer, QueueClass } from '../../types.js';
import { nowPlusMsText } from '../common/fragments.js';

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
  /** Why it claims only rescued work now (consumer/stale-gate.ts); absent: it claims as usual. */
  staleOnly?: string | null | undefined;
}

/**
 * The heartbeat of a process's consumers, one statement for all of them:
 * each row written (or rewritten) with last_seen now; started_at kept from
 * its first beat. The rows come in as a derived table, so the update names
 * them `v.…` rather than VALUES(…), which MySQL 8.0.20+ deprecates.
 */
export async function beat(
  db: LedgerDb,
  t: LedgerTables,
  consumers: readonly ConsumerRow[],
  first: boolean,
): Promise<void> {
  if (consumers.length === 0) return;
  const rows = consumers.map((c, i) => {
    const as = (name: string): RawBuilder<unknown> => sql.raw(i === 0 ? ` AS ${name}` : '');
    const types = c.types === null ? null : c.types.join(',');
    return sql`SELECT ${c.name}${as('name')}, ${c.queue}${as('queue')}, ${c.classes.join(',')}${as('classes')},
      ${types}${as('types')},
      ${c.concurrency}${as('concurrency')}, ${c.maxProcessing}${as('max_processing')}, ${c.epoch}${as('epoch')},
      ${c.version}${as('version')}, ${c.staleOnly ?? null}${as('stale_only')}`;
  });
  await sql`INSERT INTO ${t.consumers}
      (name, queue, classes, types, concurrency, max_processing, epoch, version, stale_only, started_at, last_seen)
    SELECT v.name, v.queue, v.classes, v.types, v.concurrency, v.max_processing, v.epoch, v.version, v.stale_only,
      NOW(6), NOW(6)
    FROM (${sql.join(rows, sql` UNION ALL `)}) AS v
    ON DUPLICATE KEY UPDATE last_seen = NOW(6), queue = v.queue, classes = v.classes, types = v.types,
      concurrency = v.concurrency, max_processing = v.max_processing, epoch = v.epoch,
      stale_only = v.stale_only`.execute(db);
  if (first)
    await sql`DELETE FROM ${t.consumers} WHERE last_seen < ${sql.raw(
      nowPlusMsText(-FORGET_AFTER_MS),
    )} LIMIT 100`.execute(db);
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
  stale_only: string | null;
  started_at: Date;
  last_seen: Date;
}

/** The consumers whose last heartbeat is younger than CONSUMER_LIVE_MS, of one queue or all, by queue and name. */
export async function liveConsumers(db: LedgerDb, t: LedgerTables, queue?: string): Promise<LiveConsumer[]> {
  const ofQueue = queue === undefined ? sql`` : sql`queue = ${queue} AND`;
  const since = sql.raw(nowPlusMsText(-CONSUMER_LIVE_MS));
  const r = await sql<Row>`SELECT name, queue, classes, types, concurrency, max_processing, epoch, version, stale_only,
      started_at, last_seen
    FROM ${t.consumers} WHERE ${ofQueue} last_seen >= ${since} ORDER BY queue, name`.execute(db);
  return r.rows.map((x) => ({
    name: x.name,
    queue: x.queue,
    classes: x.classes.split(',').filter((c) => c !== '') as QueueClass[],
    types: x.types === null ? null : x.types.split(','),
    concurrency: Number(x.concurrency),
    maxProcessing: x.max_processing === null ? null : Number(x.max_processing),
    epoch: x.epoch === null ? null : Number(x.epoch),
    version: x.version,
    staleOnly: x.stale_only,
    startedAt: x.started_at,
    lastSeen: x.last_seen,
  }));
}
