import { createHash } from 'node:crypto';

// What an idempotency key promises: a repeat of the same request. The digest
// stored with the key (items.request_digest, schema 13) tells a repeat from
// a different request reusing the key (IdempotencyConflictError).

/** Bytes of SHA-256 kept: 128 bits tell two requests apart as surely as 256, in half the row. */
export const REQUEST_DIGEST_BYTES = 16;

/**
 * What a request is, for its key: the queue, type, lane and payload; not when it runs, its priority or its attempts.
 */
export interface DigestedRequest {
  queue: string;
  type: string;
  lane: string | null;
  /** The payload as JSON text (JSON.stringify's). */
  payloadJson: string;
}

/**
 * The request's digest as hex: SHA-256 of a canonical JSON of its parts,
 * object keys sorted, so a payload built with its keys in another order is
 * the same request.
 */
export function requestDigest(r: DigestedRequest): string {
  const canonical = `[${JSON.stringify(r.queue)},${JSON.stringify(r.type)},${JSON.stringify(r.lane)},${canonicalJson(
    JSON.parse(r.payloadJson),
  )}]`;
  return createHash('sha256')
    .update(canonical, 'utf8')
    .digest('hex')
    .slice(0, REQUEST_DIGEST_BYTES * 2);
}

/**
 * JSON text of a parsed JSON value with every object's keys in sorted order. Written, not rebuilt: a `__proto__` key
 * stays a key.
 */
function canonicalJson(v: unknown): string {
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v);
    case 'number':
      // What JSON.stringify writes for a finite number (JSON.parse gives no other).
      return String(v);
    case 'boolean':
      return v ? 'true' : 'false';
    default: {
      if (v === null || typeof v !== 'object') return 'null';
      let out: string;
      if (Array.isArray(v)) {
        out = '[';
        for (let i = 0; i < v.length; i++) out += (i === 0 ? '' : ',') + canonicalJson(v[i]);
        return `${out}]`;
      }
      const o = v as Record<string, unknown>;
      const keys = Object.keys(o).sort();
      out = '{';
      for (let i = 0; i < keys.length; i++)
        out += `${i === 0 ? '' : ','}${JSON.stringify(keys[i])}:${canonicalJson(o[keys[i]!])}`;
      return `${out}}`;
    }
  }
}
