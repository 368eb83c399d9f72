import { sql } from 'kysely';
import type { Executor } from '../connection.js';
import type { LedgerTables } from '../tables.js';
import type { QueueSeries, SeriesPoint } from '../types.js';
import { inline, NO_TIME } from './common.js';

export const SERIES_BUCKET_MS = 60_000;
export const SERIES_BUCKETS = 60;
/** The most items of a queue's last hour the series is computed from (the newest). */
export const SERIES_READ = 20_000;

/**
 * A queue's last hour in one-minute buckets: items completed and dead in
 * each minute, and the p50 and p99 from due to start of the items that
 * started in it. Read from the items created in the last hour (one range of
 * ix_created, the newest 20,000 at most): an item created earlier that
 * ended in the hour (a delayed or long-retried one) is not counted, and on
 * a queue busier than 20,000 items an hour the oldest minutes are short.
 */
export async function queueSeries(exec: Executor, t: LedgerTables, queue: string): Promise<QueueSeries> {
  const hourUs = SERIES_BUCKETS * SERIES_BUCKET_MS * 1000;
  const r = await sql<{ state: string; ended_ago_us: number | string | null; started_ago_us: number | string | null; start_us: number | string | null; now_ms: number | string }>`
    SELECT state,
      IF(terminal_at > ${NO_TIME}, TIMESTAMPDIFF(MICROSECOND, terminal_at, NOW(6)), NULL) AS ended_ago_us,
      IF(started_at > ${NO_TIME}, TIMESTAMPDIFF(MICROSECOND, started_at, NOW(6)), NULL) AS started_ago_us,
      IF(started_at >= run_after, TIMESTAMPDIFF(MICROSECOND, run_after, started_at), NULL) AS start_us,
      ROUND(UNIX_TIMESTAMP(NOW(6)) * 1000) AS now_ms
    FROM ${t.items}
    WHERE queue = ${queue} AND created_at >= NOW(6) - INTERVAL ${inline(hourUs)} MICROSECOND
    ORDER BY created_at DESC LIMIT ${inline(SERIES_READ)}`.execute(exec);
  const nowMs = r.rows[0] ? Number(r.rows[0].now_ms) : Date.now();
  const end = Math.floor(nowMs / SERIES_BUCKET_MS) * SERIES_BUCKET_MS + SERIES_BUCKET_MS;
  const start = end - SERIES_BUCKETS * SERIES_BUCKET_MS;
  const buckets = Array.from({ length: SERIES_BUCKETS }, () => ({ completed: 0, failed: 0, starts: [] as number[] }));
  const bucketOf = (agoUs: number | string | null): (typeof buckets)[number] | undefined => {
    if (agoUs === null) return undefined;
    const at = nowMs - Number(agoUs) / 1000;
    return at < start ? undefined : buckets[Math.min(SERIES_BUCKETS - 1, Math.floor((at - start) / SERIES_BUCKET_MS))];
  };
  for (const row of r.rows) {
    const ended = bucketOf(row.ended_ago_us);
    if (ended && row.state === 'completed') ended.completed++;
    if (ended && row.state === 'dead') ended.failed++;
    const started = bucketOf(row.started_ago_us);
    if (started && row.start_us !== null) started.starts.push(Number(row.start_us) / 1000);
  }
  const points: SeriesPoint[] = buckets.map((b, i) => {
    const sorted = b.starts.sort((x, y) => x - y);
    return { at: new Date(start + i * SERIES_BUCKET_MS), completed: b.completed, failed: b.failed, startP50Ms: quantile(sorted, 0.5), startP99Ms: quantile(sorted, 0.99) };
  });
  return { bucketMs: SERIES_BUCKET_MS, points };
}

function quantile(sorted: readonly number[], q: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? null;
}
