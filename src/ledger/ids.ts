import { randomBytes } from 'node:crypto';

/**
 * 128 random bits, base64url (22 ASCII chars). Random leading bytes spread
 * inserts across TiDB regions instead of piling them on the newest one.
 */
export function newId(): string {
  return randomBytes(16).toString('base64url');
}

/** A lease token: fences every write of the claim it was issued with. */
export const newLeaseToken = newId;
