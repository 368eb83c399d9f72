import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { LedgerDb } from '../../connection.js';
import { retryOnConflict } from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import type { RateAnswer } from '../../types.js';
import { affected, inline, NO_TIME } from '../common/fragments.js';
import { retryPipelined } from '../common/pipeline.js';

/**
 * A key's rate limit (docs/design/consumer.md, "Rate limits"), one row per queue
 * and key: `next_at`, the earliest the next start may be, and
 * `reserved_until`, up to when items refused a start have been given turns.
 * A start is granted by a CAS on `next_at <= NOW(6)` that moves it
 * `intervalUs` on (the limit's spacing, times the items starting), so starts
 * of one key are at least that far apart on the ledger's clock, fleet-wide,
 * and no window of the limit's length holds more than its max. The grant
 * also stamps the item's `started_at`: its attempt starts now.
 */
export interface RateTake {
  queue: string;
  key: string;
  /** The item starting, held under this token. */
  id: string;
  token: string;
  intervalUs: number;
}

export async function takeRate(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  take: RateTake,
): Promise<RateAnswer> {
  // The grant and, should it be refused, what the refusal needs to know, in one round trip.
  const [granted, state] = await retryPipelined(db, caps, (send) =>
    send([grant(t, take), refusalState(t, take)], { commit: true }),
  );
  if ((granted?.affected ?? 0) > 0) return { granted: true };
  const r = state?.rows[0] as
    | { wait_us: number | string | null; queued: number | string | null; held: number | string | null }
    | undefined;
  if (r?.held === null || r?.held === undefined) return { granted: false, lost: true };
  if (r.wait_us === null) {
    // The key's first start: its row, then the grant again.
    await sql`INSERT IGNORE INTO ${t.rateLimits} (queue, rate_key, next_at, reserved_until) VALUES (${take.queue}, ${
      take.key
    }, ${NO_TIME}, ${NO_TIME})`.execute(db);
    if (affected(await retryOnConflict(() => grant(t, take).execute(db))) > 0) return { granted: true };
  }
  return {
    granted: false,
    waitMs: Math.max(0, Number(r.wait_us ?? 0) / 1000),
    queued: Number(r.queued ?? 0) === 1,
    dueForMs: Number(r.held) / 1000,
  };
}

function grant(t: LedgerTables, take: RateTake): RawBuilder<unknown> {
  return sql`UPDATE ${t.rateLimits} r JOIN ${t.items} i ON i.id = ${inline(take.id)} AND i.lease_token = ${inline(
    take.token,
  )} AND i.state = 'processing'
    SET r.next_at = NOW(6) + INTERVAL ${inline(take.intervalUs)} MICROSECOND, i.started_at = NOW(6)
    WHERE r.queue = ${inline(take.queue)} AND r.rate_key = ${inline(take.key)} AND r.next_at <= NOW(6)`;
}

/**
 * How long until the key's next start (NULL: the key has no row), whether turns are given out past it, and how long the
 * item has been due (NULL: its lease is gone).
 */
function refusalState(t: LedgerTables, take: RateTake): RawBuilder<unknown> {
  return sql`SELECT
      (SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), next_at) FROM ${t.rateLimits} WHERE queue = ${
        take.queue
      } AND rate_key = ${take.key}) AS wait_us,
      (SELECT reserved_until > next_at FROM ${t.rateLimits} WHERE queue = ${take.queue} AND rate_key = ${
        take.key
      }) AS queued,
      (SELECT TIMESTAMPDIFF(MICROSECOND, run_after, NOW(6)) FROM ${t.items} WHERE id = ${take.id} AND lease_token = ${
        take.token
      } AND state = 'processing') AS held`;
}

/**
 * A turn for an item refused a start: the first free one at or after the
 * key's next start, `intervalUs` long. Returns how long from now it is
 * (ms), for the item's release: refused items wake one turn apart instead
 * of all at once. One transaction in one round trip: the row's
 * `reserved_until` moved on past the turn, then read back (the write holds
 * the row, so the read is this turn's end). Every refused item of a key
 * writes its row; in TiDB's optimistic mode a retry takes its lock first
 * (sql/common/lock-early.ts), so the turn is not lost to them at COMMIT.
 */
export async function reserveRateTurn(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: { queue: string; key: string; intervalUs: number },
): Promise<number> {
  const where = sql`WHERE queue = ${inline(spec.queue)} AND rate_key = ${inline(spec.key)}`;
  const [, read] = await retryPipelined(db, caps, (send) =>
    send(
      [
        sql`UPDATE ${t.rateLimits} SET reserved_until = GREATEST(reserved_until, next_at, NOW(6)) + INTERVAL ${inline(
          spec.intervalUs,
        )} MICROSECOND ${where}`,
        sql`SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), reserved_until) - ${inline(spec.intervalUs)} AS slot_us FROM ${
          t.rateLimits
        } ${where}`,
      ],
      { commit: true },
    ),
  );
  const row = read?.rows[0] as { slot_us: number | string } | undefined;
  // No row: the key's next start is as good a time as any to ask again.
  return row === undefined ? 0 : Math.max(0, Number(row.slot_us) / 1000);
}

/**
 * Deletes up to `limit` key rows whose next start and every turn given out
 * are older than `olderThanMs`: such a row grants as a missing one would
 * (takeRate makes a missing row afresh), so a key used once keeps no row.
 * A grant or turn racing the DELETE either finds the row gone and makes it
 * again, or moved it on first, and then the row stays.
 */
export async function deleteSpentRateRows(
  db: LedgerDb,
  t: LedgerTables,
  opts: { olderThanMs: number; limit: number; queue?: string | undefined },
): Promise<number> {
  const cutoff = sql`NOW(6) - INTERVAL ${inline(Math.round(opts.olderThanMs * 1000))} MICROSECOND`;
  const inQueue = opts.queue === undefined ? sql`` : sql`queue = ${inline(opts.queue)} AND `;
  return affected(
    await retryOnConflict(() =>
      sql`DELETE FROM ${t.rateLimits} WHERE ${inQueue}next_at < ${cutoff} AND reserved_until < ${cutoff} LIMIT ${inline(
        opts.limit,
      )}`.execute(db),
    ),
  );
}

/** A handler's RateLimitedError: the key's next start is no sooner than `afterMs` from now. */
export async function pushRateWindow(
  db: LedgerDb,
  t: LedgerTables,
  spec: { queue: string; key: string; afterMs: number },
): Promise<void> {
  const us = Math.round(spec.afterMs * 1000);
  await sql`INSERT INTO ${t.rateLimits} (queue, rate_key, next_at, reserved_until) VALUES (${spec.queue}, ${
    spec.key
  }, NOW(6) + INTERVAL ${inline(us)} MICROSECOND, ${NO_TIME})
    ON DUPLICATE KEY UPDATE next_at = GREATEST(next_at, NOW(6) + INTERVAL ${inline(us)} MICROSECOND)`.execute(db);
}
