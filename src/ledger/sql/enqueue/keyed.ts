import type { LedgerCapabilities } from '../../capabilities.js';
import type { LedgerDb } from '../../connection.js';
import { newItemId } from '../../ids.js';
import type { LedgerTables } from '../../tables.js';
import type { EnqueueResult } from '../../types.js';
import { admissionsOf } from './admit-keyed.js';
import { expectInserted, insertStatement, optionalColumns, valuesRow } from './insert-statement.js';
import type { NewItem } from './new-item.js';
import { admitStatement, admittedKeys, grantedRead } from '../keys/admission.js';
import { waitRowsFor } from '../keys/key-waits.js';
import { retryPipelined } from '../common/pipeline.js';

/**
 * A batch with concurrency keys and without lanes or idempotency keys, in
 * two round trips on a connection that takes several statements per query:
 * the key rows' upsert admits (and locks the keys) and its read-back says
 * what each key granted; then one multi-row INSERT of the items, heads or
 * not as granted, the wait rows of those not admitted, and COMMIT.
 *
 * The laned path's one round trip (laned.ts) joins each item to its
 * key row in an `INSERT … SELECT` from a derived table of one SELECT per
 * item, then reads every item back: on MariaDB that costs the server and
 * this process more per item than a plain INSERT (docs/BENCHMARKS.md,
 * "Capacity"). Here the client knows what
 * it inserts, so the INSERT is the plain one and nothing is read back; the
 * keys stay locked across one turn of the client.
 */
export async function insertKeyedTwoTrips(
  db: LedgerDb,
  caps: LedgerCapabilities,
  t: LedgerTables,
  items: readonly NewItem[],
): Promise<EnqueueResult[]> {
  const columns = optionalColumns(items);
  return retryPipelined(db, caps, async (send, exec) => {
    const keys = await admittedKeys(exec, t, items);
    const [, granted] = await send([admitStatement(t, keys), grantedRead(t, keys)]);
    const admitted = admissionsOf(items, granted?.rows ?? []);
    const ids = items.map(() => newItemId(caps.idOrder));
    const heads = admitted.map((a) => a?.head ?? true);
    const waiting = ids.filter((_, i) => !heads[i]);
    const [inserted] = await send(
      [
        insertStatement(
          t,
          items.map((item, i) => valuesRow(ids[i]!, item, null, heads[i]!, columns)),
          columns,
        ),
        ...(waiting.length > 0 ? [waitRowsFor(t, waiting)] : []),
      ],
      { commit: true },
    );
    expectInserted(inserted?.affected ?? 0, items.length);
    return ids.map((id) => ({ id, duplicate: false, laneSeq: null }));
  });
}
