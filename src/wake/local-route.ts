import type { Reservation } from '../consumer/reservations.js';
import type { QueueClass } from '../ledger/types.js';
import type { WakeMessage } from './messages.js';

/** A consumer in this process that can take wake-ups without a Redis round trip. */
export interface LocalWakeTarget {
  readonly queue: string;
  readonly classes: readonly QueueClass[];
  /**
   * Takes the wake-up if it has a free slot to claim with (then it will claim
   * the named ids, exactly as for a wake-up read from the stream) and
   * answers whether it did. Must not throw.
   */
  takeWake(message: WakeMessage & { queueClass: QueueClass }): boolean;
  /**
   * Holds up to `n` free slots for items a producer is about to insert
   * already claimed (due now, of these types; a laned item only as its
   * lane's head), or undefined if it cannot take any. Must not throw.
   */
  atInsert(queueClass: QueueClass, types: ReadonlySet<string>, n: number): Reservation | undefined;
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
 *
 * A step further, a producer can insert items already claimed for a local
 * consumer with free slots (`atInsert`): one commit instead of two before
 * the handler starts. The lease is the same fence as a claim's; if the
 * process dies, it expires and the item is reclaimed like any other.
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

  has(queue: string): boolean {
    return this.byQueue.has(queue);
  }

  /** Slots of a local consumer of `queue` for items inserted already claimed, if one has any free. */
  atInsert(queue: string, queueClass: QueueClass, types: ReadonlySet<string>, n: number): Reservation | undefined {
    return this.firstTaker(queue, queueClass, (t) => t.atInsert(queueClass, types, n));
  }

  /** True if a local consumer took the wake-up. */
  deliver(queue: string, message: WakeMessage & { queueClass: QueueClass }): boolean {
    return this.firstTaker(queue, message.queueClass, (t) => t.takeWake(message) || undefined) ?? false;
  }

  /** Asks the consumers of `queue` and `queueClass` in turn, starting one further each time; the first answer wins. */
  private firstTaker<T>(
    queue: string,
    queueClass: QueueClass,
    ask: (target: LocalWakeTarget) => T | undefined,
  ): T | undefined {
    const targets = this.byQueue.get(queue);
    if (!targets) return undefined;
    const count = targets.length;
    const first = this.turn++ % count;
    for (let k = 0; k < count; k++) {
      const target = targets[(first + k) % count]!;
      if (!target.classes.includes(queueClass)) continue;
      const answer = ask(target);
      if (answer !== undefined) return answer;
    }
    return undefined;
  }
}
