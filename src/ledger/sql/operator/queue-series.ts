import { sql } from 'kysely';
import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import type { QueueSeries, SeriesPoint } from '../../operator-types.js';
import { inline, NO_TIME } from '../common/fragments.js';

export const SERIES_BUCKET_MS = 60_000;
export const SERIES_BUCKETS = 60;
/** The most items of a queue's last hour the series is computed from (the newest). */
export const SERIES_READ = 20_000;

/**
 * A queue's last hour in one-minute buckets: items completed and dead in
 * each minute, and the p50 and p99 from enqueue to start of the items that
 * started in it (to within 19%: a histogram of quarter-powers of two). Read from the items created in the last hour
 * (one range of
 * ix_created, the newest 20,000 at most): an item created earlier that
 * ended in the hour (a delayed or long-retried one) is not counted, and on
 * a queue busier than 20,000 items an hour the oldest minutes are short.
 */
export async function queueSeries(exec: Executor, t: LedgerTables, queue: string): Promise<QueueSeries> {
  const hourUs = SERIES_BUCKETS * SERIES_BUCKET_MS * 1000;
  const started = sql`started_at > ${NO_TIME} AND started_at >= created_at`;
  // The hour's ids are read from the index alone (a statement reading the rows too was planned as a
  // scan of the whole queue from its newest entry), then their rows by primary key. Grouped on the server: per minute
  // of ending and state, per minute of starting and
  // quarter-power-of-two of the time from enqueue to start (so a percentile is within 19%).
  const r = await sql<{
    now_min: number | string;
    end_min: number | string | null;
    ended: string | null;
    start_min: number | string | null;
    start_bucket: number | string | null;
    n: number | string;
  }>`
    SELECT MAX(now_min) AS now_min, end_min, ended, start_min, start_bucket, COUNT(*) AS n FROM (
      SELECT FLOOR(UNIX_TIMESTAMP(NOW(6)) / 60) AS now_min, IF(terminal_at > ${
        NO_TIME
      }, FLOOR(UNIX_TIMESTAMP(terminal_at) / 60), NULL) AS end_min,
        IF(state IN ('completed', 'dead'), state, NULL) AS ended,
        IF(${started}, FLOOR(UNIX_TIMESTAMP(started_at) / 60), NULL) AS start_min,
        IF(${
          started
        }, FLOOR(LOG2(GREATEST(TIMESTAMPDIFF(MICROSECOND, created_at, started_at), 1)) * 4), NULL) AS start_bucket
      FROM ${t.items} JOIN (SELECT id AS w FROM ${t.items} WHERE queue = ${
        queue
      } AND created_at >= NOW(6) - INTERVAL ${inline(hourUs)} MICROSECOND
        ORDER BY created_at DESC LIMIT ${inline(SERIES_READ)}) w ON id = w.w) d
    GROUP BY end_min, ended, start_min, start_bucket`.execute(exec);
  const nowMin = r.rows[0] ? Number(r.rows[0].now_min) : Math.floor(Date.now() / SERIES_BUCKET_MS);
  const firstMin = nowMin - SERIES_BUCKETS + 1;
  const buckets = Array.from({ length: SERIES_BUCKETS }, () => ({
    completed: 0,
    failed: 0,
    starts: new Map<number, number>(),
  }));
  const bucketOf = (minute: number | string | null): (typeof buckets)[number] | undefined =>
    minute === null ? undefined : buckets[Number(minute) - firstMin];
  for (const row of r.rows) {
    const n = Number(row.n);
    const ended = bucketOf(row.end_min);
    if (ended && row.ended === 'completed') ended.completed += n;
    if (ended && row.ended === 'dead') ended.failed += n;
    const start = bucketOf(row.start_min);
    if (start && row.start_bucket !== null)
      start.starts.set(Number(row.start_bucket), (start.starts.get(Number(row.start_bucket)) ?? 0) + n);
  }
  const points: SeriesPoint[] = buckets.map((b, i) => ({
    at: new Date((firstMin + i) * SERIES_BUCKET_MS),
    completed: b.completed,
    failed: b.failed,
    startP50Ms: quantile(b.starts, 0.5),
    startP99Ms: quantile(b.starts, 0.99),
  }));
  return { bucketMs: SERIES_BUCKET_MS, points };
}

/**
 * The `q` quantile of a histogram of quarter-powers of two of microseconds, as the top of its bucket in ms; null when
 * empty.
 */
function quantile(histogram: ReadonlyMap<number, number>, q: number): number | null {
  const total = [...histogram.values()].reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  let seen = 0;
  for (const [bucket, n] of [...histogram].sort((a, b) => a[0] - b[0])) {
    seen += n;
    if (seen >= q * total) return Math.round(2 ** ((bucket + 1) / 4)) / 1000;
  }
  return null;
}
