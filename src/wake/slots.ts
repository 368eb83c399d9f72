import { groupBy } from '../group-by.js';
/** Redis Cluster key slots (CRC16/XMODEM of the key, or of its `{hash tag}`, mod 16384). */
export const SLOT_COUNT = 16384;

function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const b of bytes) {
    crc ^= b << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

export function keySlot(key: string): number {
  const open = key.indexOf('{');
  if (open >= 0) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  return crc16(new TextEncoder().encode(key)) % SLOT_COUNT;
}

/**
 * `items` grouped by the slot of `keyOf(item)`, in first-seen order: one multi-key command per group is single-slot.
 */
export function groupBySlot<T>(items: readonly T[], keyOf: (item: T) => string): T[][] {
  return [...groupBy(items, (item) => keySlot(keyOf(item))).values()];
}
