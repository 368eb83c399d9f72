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
  if (offset === pool.length) {
    randomFillSync(pool);
    offset = 0;
  }
  const id = pool.toString('base64url', offset, offset + ID_BYTES);
  offset += ID_BYTES;
  return id;
}

/** A lease token: fences every write of the claim it was issued with. */
export const newLeaseToken = newId;

/** SHA-256 (hex) of an item's last error text; '' when it has none. The replay guard compares it. */
export function errorDigest(lastError: string | null): string {
  return createHash('sha256').update(lastError ?? '', 'utf8').digest('hex');
}
