import { createHash, randomFillSync } from 'node:crypto';

const ID_BYTES = 16;
/** Random bytes drawn 256 ids at a time: one crypto call per id cost more than the rest of an enqueue's id work. */
const pool = Buffer.alloc(ID_BYTES * 256);
let offset = pool.length;

/**
 * 128 random bits, base64url (22 ASCII chars). Random leading bytes spread
 * inserts across TiDB regions instead of piling them on the newest one.
 */
export function newId(): string {
  if (offset + ID_BYTES > pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  const id = pool.toString('base64url', offset, offset + ID_BYTES);
  offset += ID_BYTES;
  return id;
}

/**
 * Which ids an item table gets: `time` ids sort by creation, so InnoDB
 * (MariaDB, MySQL) appends each insert at the right edge of its clustered
 * index and of every secondary index that ends in the id, instead of
 * splitting pages all over them; `random` ids keep TiDB's inserts spread
 * over its regions, where keys in creation order make one write hotspot.
 * Both are 22 chars of [A-Za-z0-9_-], so the API sees one id type.
 */
export type IdOrder = 'time' | 'random';

/** The alphabet of base64url in ASCII order, so that ids compare (ascii_bin) as their values do. */
const SORTED = '-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz';
const TIME_EPOCH_MS = Date.UTC(2020, 0, 1);
const TIME_CHARS = 7; // 42 bits of milliseconds since 2020: until the year 2159
const RANDOM_CHARS = 22 - TIME_CHARS; // 90 random bits

/** An item id in the given order (see IdOrder). */
export function newItemId(order: IdOrder): string {
  return order === 'time' ? newTimeId(Date.now()) : newId();
}

/** Milliseconds since 2020 in 7 chars, then 90 random bits. Exported for its test. */
export function newTimeId(nowMs: number): string {
  if (offset + RANDOM_CHARS > pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  let ms = Math.max(0, nowMs - TIME_EPOCH_MS);
  let time = '';
  for (let i = 0; i < TIME_CHARS; i++) {
    time = SORTED[ms % 64]! + time;
    ms = Math.floor(ms / 64);
  }
  let rest = '';
  for (let i = 0; i < RANDOM_CHARS; i++) rest += SORTED[pool[offset + i]! & 63]!;
  offset += RANDOM_CHARS;
  return time + rest;
}

/** The id order for a server: random on TiDB, time-ordered on InnoDB. */
export function idOrderFor(family: 'mariadb' | 'mysql' | 'tidb'): IdOrder {
  return family === 'tidb' ? 'random' : 'time';
}

/** A lease token: fences every write of the claim it was issued with. */
export const newLeaseToken = newId;

/** SHA-256 (hex) of an item's last error text; '' when it has none. The replay guard compares it. */
export function errorDigest(lastError: string | null): string {
  return createHash('sha256')
    .update(lastError ?? '', 'utf8')
    .digest('hex');
}
