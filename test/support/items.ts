import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { expect } from 'vitest';
import type { Ledger } from '../../src/ledger/ledger.js';
import type { AttemptRecord, ClaimedItem, WorkItem } from '../../src/ledger/types.js';
import { waitFor } from './ledger.js';

let queueCounter = 0;

/** A queue name of its own for one test (1-64 chars of [a-z0-9._-]). */
export function freshQueue(label: string): string {
  queueCounter += 1;
  const clean = label
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .slice(0, 40);
  return `${clean}-${queueCounter}-${randomBytes(3).toString('hex')}`;
}

/** Rows in the items table (optionally of one queue, and of one state). */
export async function itemCount(ledger: Ledger, queue?: string, state?: string): Promise<number> {
  const inState = state === undefined ? sql`` : sql`AND state = ${state}`;
  const filter = queue === undefined ? sql`` : sql`WHERE queue = ${queue} ${inState}`;
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.items} ${filter}`.execute(
    ledger.db,
  );
  return Number(r.rows[0]?.n ?? -1);
}

/** Rows in the attempt-history table (optionally of one item). */
export async function historyCount(ledger: Ledger, itemId?: string): Promise<number> {
  const filter = itemId === undefined ? sql`` : sql`WHERE item_id = ${itemId}`;
  const r = await sql<{ n: number | string }>`SELECT COUNT(*) AS n FROM ${ledger.tables.attempts} ${filter}`.execute(
    ledger.db,
  );
  return Number(r.rows[0]?.n ?? -1);
}

/** The lane bookkeeping row (its last sequence, and whether it has an unfinished item), or undefined. */
export async function laneRow(
  ledger: Ledger,
  queue: string,
  lane: string,
): Promise<{ nextSeq: number; busy: boolean } | undefined> {
  const r = await sql<{
    next_seq: number | string;
    busy_from: number | string;
  }>`SELECT next_seq, busy_from FROM ${ledger.tables.lanes}
    WHERE queue = ${queue} AND lane = ${lane}`.execute(ledger.db);
  const row = r.rows[0];
  return row ? { nextSeq: Number(row.next_seq), busy: Number(row.busy_from) !== 0 } : undefined;
}

/** An item's row in the waits table (present exactly while the item is blocked), or undefined. */
export async function waitRow(
  ledger: Ledger,
  itemId: string,
): Promise<{ queue: string; dependencyKey: string; probeAfter: Date } | undefined> {
  const r = await sql<{
    queue: string;
    dependency_key: string;
    probe_after: Date;
  }>`SELECT queue, dependency_key, probe_after
    FROM ${ledger.tables.waits} WHERE item_id = ${itemId}`.execute(ledger.db);
  const row = r.rows[0];
  return row ? { queue: row.queue, dependencyKey: row.dependency_key, probeAfter: row.probe_after } : undefined;
}

/** The only element of `list`, failing the test when there is not exactly one. */
export function only<T>(list: readonly T[], what = 'list'): T {
  expect(list, `${what} should hold exactly one element`).toHaveLength(1);
  const first = list[0];
  if (first === undefined) throw new Error(`${what}: empty`);
  return first;
}

/** The item, failing the test when it does not exist. */
export async function mustGet(ledger: Ledger, id: string): Promise<WorkItem> {
  const item = await ledger.get(id);
  if (!item) throw new Error(`item ${id} does not exist`);
  return item;
}

export async function history(ledger: Ledger, id: string): Promise<AttemptRecord[]> {
  const r = await ledger.inspect(id);
  if (!r) throw new Error(`item ${id} does not exist`);
  return r.attempts;
}

/** Claims exactly one item of `queue` (fails otherwise). */
export async function claimOne(
  ledger: Ledger,
  queue: string,
  owner = 'worker-a',
  leaseMs = 60_000,
): Promise<ClaimedItem> {
  const c = await ledger.claim({ queue, owner, limit: 10, leaseMs });
  return only(c.items, `claim of ${queue}`);
}

/** Claims everything claimable in `queue` now. */
export async function claimAll(
  ledger: Ledger,
  queue: string,
  owner = 'worker-a',
  leaseMs = 60_000,
): Promise<ClaimedItem[]> {
  const c = await ledger.claim({ queue, owner, limit: 1000, leaseMs });
  return c.items;
}

/** The same claim, but holding a lease token that was never issued. */
export function withForeignToken(item: ClaimedItem): ClaimedItem {
  return { ...item, leaseToken: randomBytes(16).toString('base64url') };
}

/** A date's ms, failing the test when there is none. */
export const ms = (d: Date | null | undefined): number => {
  if (!d) throw new Error('expected a date');
  return d.getTime();
};

/** Claims with a short lease, then waits until the reclaimer has taken it back. */
export async function expireAndReclaim(ledger: Ledger, queue: string, ids: readonly string[]): Promise<void> {
  const waiting = new Set(ids);
  await waitFor(
    async () => {
      const r = await ledger.reclaimExpired({ queue });
      for (const id of [...r.reclaimed, ...r.dead]) waiting.delete(id);
      return waiting.size === 0;
    },
    10_000,
    `reclaim of ${ids.length} expired lease(s)`,
  );
}
