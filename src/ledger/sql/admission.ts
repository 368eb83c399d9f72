import { sql, type RawBuilder } from 'kysely';
import type { LedgerCapabilities } from '../capabilities.js';
import type { LedgerDb } from '../connection.js';
import { runTransaction } from '../retry.js';
import type { LedgerTables } from '../tables.js';
import { inline } from './common.js';
import { beginLockingEarly } from './lock-early.js';
import { processingCount } from './stats.js';

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
 * The row is held from its write to COMMIT. What the claim must read
 * inside its turn (its candidates: read before the turn, they would be the
 * ones the claim before it just took) it names as `alongside`, sent in the
 * same round trip as the turn and the count where the pool allows; `claim`
 * then gets the transaction, the room (≥ 1) and those rows, and should send
 * only its CAS. `heldUnder` names the lease token the claim grants: when the
 * COMMIT's answer is lost, whether that token holds an item tells whether it
 * committed.
 *
 * Every run locks early (sql/lock-early.ts), the first too, so on TiDB in
 * optimistic mode too the turn is a lock the claims queue for, and the
 * count reads READ COMMITTED (TiDB gives it only to pessimistic
 * transactions). Capped claims of a queue all write its row: a first try
 * that did not lock would only lose at COMMIT, and its prewrite, meeting
 * the row locked by another claim's retry, backs off for seconds at a
 * time instead of queueing.
 */
export async function claimUnderCap<T, R>(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  spec: { queue: string; maxProcessing: number; heldUnder: string; alongside?: RawBuilder<R> | undefined },
  claim: (trx: LedgerDb, room: number, alongside: R[]) => Promise<T[]>,
): Promise<T[]> {
  const takeTurn = sql`INSERT INTO ${t.queues} (queue, capped_claims, updated_at) VALUES (${inline(spec.queue)}, 1, NOW(6))
    ON DUPLICATE KEY UPDATE capped_claims = capped_claims + 1, updated_at = NOW(6)`;
  const count = processingCount(t, spec.queue);
  const { alongside } = spec;
  return runTransaction(
    db,
    async (trx) => {
      let processing: number;
      let rows: R[] = [];
      if (caps.multiStatement) {
        // One round trip: the row is held from here to COMMIT.
        const all = await sql`${beginLockingEarly}; ${takeTurn}; ${count}${alongside === undefined ? sql`` : sql`; ${alongside}`}`.execute(trx);
        const [, , counted, read] = all.rows as unknown as [unknown, unknown, { n: number | string }[], R[] | undefined];
        processing = Number(counted[0]?.n ?? 0);
        rows = read ?? [];
      } else {
        await beginLockingEarly.execute(trx);
        await takeTurn.execute(trx);
        processing = Number((await count.execute(trx)).rows[0]?.n ?? 0);
        if (alongside !== undefined && processing < spec.maxProcessing) rows = (await alongside.execute(trx)).rows;
      }
      const room = spec.maxProcessing - processing;
      return room > 0 ? claim(trx, room, rows) : [];
    },
    async () => {
      // Nothing claimed and not committed end the same way: running it again is safe.
      const r = await sql`SELECT 1 AS held FROM ${t.items}
        WHERE queue = ${spec.queue} AND state = 'processing' AND lease_token = ${spec.heldUnder} LIMIT 1 FOR UPDATE`.execute(db);
      return r.rows.length > 0;
    },
    { bodyLocksEarly: true },
  );
}
