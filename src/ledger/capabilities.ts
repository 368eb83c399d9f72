import { sql } from 'kysely';
import type { LedgerDb } from './connection.js';
import { idOrderFor, type IdOrder } from './ids.js';
import { CONNECTION_RETRY, isConnectionError, retryDelay } from './retry.js';

export type ServerFamily = 'mariadb' | 'mysql' | 'tidb';

/**
 * What the ledger's server and connection can do: the one place a server
 * difference lives. Statement builders in sql/ take it instead of asking
 * the server or the pool themselves (docs/design/ledger-sql.md).
 */
export interface LedgerCapabilities {
  /**
   * The connection takes several statements per query (the ledger's own
   * pool): a claim's CAS and read-back, or a pipelined transaction's steps,
   * go out together. False on a Kysely instance handed in, whose pool may not.
   */
  readonly multiStatement: boolean;
  /** The server, from `SELECT VERSION()`. */
  readonly family: ServerFamily;
  /** Item ids in creation order (InnoDB) or random (TiDB): see IdOrder. */
  readonly idOrder: IdOrder;
  /**
   * The hot statements go prepared, on the binary protocol (sql/common/bound.ts):
   * on TiDB through the ledger's own pool, where that lets TiDB's plan cache
   * serve them. MariaDB and MySQL run the same statements as text, with
   * their values inlined, for less than a prepared round trip costs.
   */
  readonly prepared: boolean;
  /**
   * On TiDB through the ledger's own pool, a few connections of their own
   * whose autocommit writes come back with a write conflict instead of being
   * run again by TiDB (connection.ts): the claim's CAS, prepared, runs there
   * and claims again on a conflict (sql/claim/cas.ts). Undefined elsewhere.
   */
  readonly conflictsReturned: LedgerDb | undefined;
}

/** TiDB's version string contains "TiDB" (`8.0.11-TiDB-v7.5.1`), MariaDB's "MariaDB"; MySQL's names neither. */
export function serverFamily(version: string): ServerFamily {
  if (/tidb/i.test(version)) return 'tidb';
  if (/mariadb/i.test(version)) return 'mariadb';
  return 'mysql';
}

/**
 * The capabilities of `db`, asked of the server once, on first need, and
 * kept (frozen) after that. Concurrent first calls share one query; a
 * failure is not kept, so the next call asks again. A lost connection is
 * retried on a fresh one, as the ledger's writes are.
 */
export function capabilitiesOnce(db: LedgerDb, ownPool: OwnPool | undefined): () => Promise<LedgerCapabilities> {
  let known: Promise<LedgerCapabilities> | undefined;
  return () => {
    if (known === undefined) {
      known = detect(db, ownPool);
      known.catch(() => (known = undefined));
    }
    return known;
  };
}

/**
 * What the ledger's own pool offers beyond a Kysely instance handed in: several statements per query, statements sent
 * prepared, and more connections on demand.
 */
export interface OwnPool {
  /** A pool of connections whose autocommit writes come back with a write conflict (TiDB only). */
  conflictsReturned(): LedgerDb;
}

async function detect(db: LedgerDb, ownPool: OwnPool | undefined): Promise<LedgerCapabilities> {
  for (let attempt = 1; ; attempt++) {
    try {
      const r = await sql<{ version: string }>`SELECT VERSION() AS version`.execute(db);
      const family = serverFamily(String(r.rows[0]?.version ?? ''));
      // Our own pool sends a statement marked prepared on the binary protocol (connection.ts); a pool handed in would
      // not.
      const prepared = ownPool !== undefined && family === 'tidb';
      return Object.freeze({
        multiStatement: ownPool !== undefined,
        family,
        idOrder: idOrderFor(family),
        prepared,
        conflictsReturned: prepared ? ownPool.conflictsReturned() : undefined,
      });
    } catch (error) {
      if (!isConnectionError(error) || attempt >= CONNECTION_RETRY.maxAttempts) throw error;
      await retryDelay(CONNECTION_RETRY, attempt);
    }
  }
}
