import type { QueueClass } from '../ledger/types.js';
import type { WakeMessage } from './channel.js';

/** A consumer in this process that can take wake-ups without a Redis round trip. */
export interface LocalWakeTarget {
  readonly queue: string;
  readonly classes: readonly QueueClass[];
  /**
   * Takes the wake-up if it has a free slot to claim with (then it will claim
   * the named ids, exactly as for a wake-up read from the stream) and
   * answers whether it did. Must not throw.
   */
  offer(message: WakeMessage & { queueClass: QueueClass }): boolean;
}

/**
 * In-process delivery of wake-ups: a producer that shares its WakeChannel
 * with a running consumer of the same queue hands the wake-up straight to
 * it while that consumer has free slots, and publishes to Redis only when
 * no local consumer can take it.
 *
 * This loses nothing the stream would have kept: a wake-up is a hint either
 * way, the ledger sweep finds whatever a crashed process had been handed,
 * and a saturated local consumer declines so the wake-up goes to the
 * stream, where idle replicas read it.
 */
export class LocalWakeRoute {
  private readonly byQueue = new Map<string, LocalWakeTarget[]>();
  /** Rotates the first target asked, so local consumers of one queue share the work. */
  private turn = 0;

  register(target: LocalWakeTarget): () => void {
    const list = this.byQueue.get(target.queue) ?? [];
    list.push(target);
    this.byQueue.set(target.queue, list);
    return () => {
      const current = this.byQueue.get(target.queue);
      if (!current) return;
      const at = current.indexOf(target);
      if (at >= 0) current.splice(at, 1);
      if (current.length === 0) this.byQueue.delete(target.queue);
    };
  }

  /** True if a local consumer took the wake-up. */
  deliver(queue: string, message: WakeMessage & { queueClass: QueueClass }): boolean {
    const targets = this.byQueue.get(queue);
    if (!targets) return false;
    const n = targets.length;
    const first = this.turn++ % n;
    for (let k = 0; k < n; k++) {
      const target = targets[(first + k) % n]!;
      if (target.classes.includes(message.queueClass) && target.offer(message)) return true;
    }
    return false;
  }
}
