import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../../capabilities.js';
import type { Executor, LedgerDb } from '../../connection.js';
import {
  CONNECTION_RETRY,
  isConnectionError,
  readAfterLostConnection,
  retryDelay,
  retryOnConflict,
} from '../../retry.js';
import type { LedgerTables } from '../../tables.js';
import { inline } from '../common/fragments.js';
import { pipelined, type StatementResult } from '../common/pipeline.js';
import { processingCount } from '../operator/stats.js';

/** A claim under a queue's fleet cap, as claimUnderCap runs it. */
export interface CappedClaim<Row, T> {
  queue: string;
  maxProcessing: number;
  /** The most the claim takes, room allowing. */
  want: number;
  /** The ids it may claim: named, or candidates read before the turn. */
  ids: readonly string[];
  /** For a head search, its candidates' read: on TiDB it runs inside the turn instead. */
  candidates?: CandidatesInTurn | undefined;
  /** The claim's CAS over some of its ids, as text, without ORDER BY or LIMIT. */
  cas: (ids: readonly string[]) => string;
  /** What the claim's lease token holds among those ids. */
  readBack: (ids: readonly string[]) => RawBuilder<Row>;
  /** The claim's answer from the rows read back. */
  won: (rows: Row[]) => T[];
  /**
   * Work that must commit with the claim (a coalescing claim joins its
   * heads' groups, which count against the cap too): run in the turn's
   * transaction, after the CAS, with the room the CAS left.
   */
  inTurn?: ((trx: Executor, won: T[], roomLeft: number) => Promise<T[]>) | undefined;
}

/**
 * A head search's candidate read, run inside the capped turn; the turn takes the first of `ids(rows)` (earliest due
 * first).
 */
export interface CandidatesInTurn {
  read: RawBuilder<unknown>;
  ids: (rows: readonly unknown[]) => string[];
}

/**
 * What a claim may admit: a queue's fleet cap, `maxProcessing` (docs/design.md
 * §6, "The fleet cap"). The claim runs in a transaction that first writes the
 * queue's row of `lw_queues`, which every capped claim of the queue writes,
 * so capped claims of one queue take turns; then counts the queue's
 * processing items, which under READ COMMITTED sees every claim committed
 * before this one got the row; then claims at most the room left.
 * Expired leases still count until the sweep takes them back: reclaiming is
 * never held back by the cap, and the reclaimed items, which keep their
 * place, are the next admitted. Uncapped claims never touch the row.
 *
 * Every other capped claim of the queue waits while the row is held, so the
 * turn is one round trip, decided by the server alone: BEGIN, the turn, the
 * room (`@lw_room`, the count's complement, at most `want`), the CAS with
 * the room as its LIMIT (a server-side prepared statement, the one way a
 * LIMIT takes a value computed in the same round trip), the read-back and
 * COMMIT. Held across round trips, the row's wait grew with every pause of
 * the claiming process between them (docs/BENCHMARKS.md). The candidates are read before the turn, by
 * the caller: the CAS re-checks each, and several times as many as wanted
 * are read, so a turn finds enough left that the turns before it did not
 * take. Only a claim with work in the turn (`inTurn`) commits apart.
 *
 * On TiDB the turn is two round trips: the row, the room and the
 * candidates' read; then the CAS of the earliest due of them (or of the
 * named ids), only as many as the room allows, the read-back and COMMIT. Candidates read before the
 * turn include items the turns before it claimed, which their holders are
 * completing meanwhile; a pessimistic CAS over those meets the
 * completions' commits, which TiDB's deadlock detector does not see, and
 * capped claims stalled on the row for TiDB's 50 s lock wait.
 *
 * When the answer of the round trip that commits is lost, what the token
 * holds tells whether it committed (its leases are read back, waiting for
 * the lost session's locks); holding nothing, the turn runs again.
 *
 * Every run locks early (sql/common/lock-early.ts), the first too, so on TiDB in
 * optimistic mode too the turn is a lock the claims queue for, and the
 * count reads READ COMMITTED (TiDB gives it only to pessimistic
 * transactions). Capped claims of a queue all write its row: a first try
 * that did not lock would only lose at COMMIT, and its prewrite, meeting
 * the row locked by another claim's retry, backs off for seconds at a
 * time instead of queueing.
 */
export async function claimUnderCap<Row, T>(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  claim: CappedClaim<Row, T>,
): Promise<T[]> {
  const takeTurn = sql`INSERT INTO ${t.queues} (queue, capped_claims, updated_at) VALUES (${inline(
    claim.queue,
  )}, 1, NOW(6))
    ON DUPLICATE KEY UPDATE capped_claims = capped_claims + 1, updated_at = NOW(6)`;
  const room = sql`SELECT @lw_room := GREATEST(0, LEAST(${inline(claim.want)}, ${inline(
    claim.maxProcessing,
  )} - (${processingCount(t, claim.queue)}))) AS room`;
  const ordered = (ids: readonly string[], limit: string): string =>
    `${claim.cas(ids)} ORDER BY priority, run_after, id LIMIT ${limit}`;
  const commitsWithCas = claim.inTurn === undefined;
  /** The ids the CAS named: what a lost answer is read back by. */
  let named = claim.ids;
  for (let lost = 1; ; lost++) {
    let commitSent = false;
    let answer: T[] | undefined;
    try {
      return await retryOnConflict(() => {
        commitSent = false;
        answer = undefined;
        return pipelined(
          db,
          caps,
          async (send, trx) => {
            let roomBefore: number;
            let cas: StatementResult | undefined;
            let read: StatementResult | undefined;
            if (caps.family === 'tidb') {
              const [, counted, candidates] = await send([
                takeTurn,
                room,
                ...(claim.candidates === undefined ? [] : [claim.candidates.read]),
              ]);
              roomBefore = roomOf(counted);
              named = (
                candidates === undefined || claim.candidates === undefined
                  ? claim.ids
                  : claim.candidates.ids(candidates.rows)
              ).slice(0, roomBefore);
              if (roomBefore === 0 || named.length === 0) return [];
              commitSent = commitsWithCas;
              [cas, read] = await send([sql.raw(ordered(named, String(roomBefore))), claim.readBack(named)], {
                commit: commitsWithCas,
              });
            } else {
              if (claim.ids.length === 0) return [];
              commitSent = commitsWithCas;
              const sent = await send(
                [
                  takeTurn,
                  room,
                  sql`PREPARE lw_capped_cas FROM ${inline(ordered(claim.ids, '?'))}`,
                  sql`EXECUTE lw_capped_cas USING @lw_room`,
                  claim.readBack(claim.ids),
                ],
                { commit: commitsWithCas },
              );
              roomBefore = roomOf(sent[1]);
              [cas, read] = [sent[3], sent[4]];
            }
            const won = claim.won((read?.rows ?? []) as Row[]);
            answer = claim.inTurn === undefined ? won : await claim.inTurn(trx, won, roomBefore - (cas?.affected ?? 0));
            commitSent = true;
            return answer;
          },
          { lockEarly: true },
        );
      });
    } catch (error) {
      if (!isConnectionError(error) || lost >= CONNECTION_RETRY.maxAttempts) throw error;
      if (commitSent) {
        const held = await readAfterLostConnection(
          async () => (await sql<Row>`${claim.readBack(named)} FOR UPDATE`.execute(db)).rows,
          error,
        );
        if (held.length > 0) return answer ?? claim.won(held);
      }
      // Nothing held under the token: whether or not it committed, nothing was claimed, and the turn may run again.
      await retryDelay(CONNECTION_RETRY, lost);
    }
  }
}

function roomOf(result: StatementResult | undefined): number {
  return Number((result?.rows[0] as { room: number | string } | undefined)?.room ?? 0);
}
