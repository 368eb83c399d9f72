import { sleep } from '../sleep.js';
import { createRedisClient, whenReady, type RedisClient } from './redis.js';
import type { WakeChannel } from './wake-channel.js';

/**
 * The supervisor's reader of its ownership queues' control streams: queues on
 * standby have no consumer to hear an activation's broadcast, so this reads it
 * for them and says so (`onOwnership`); the ledger stays the authority.
 */
export class ControlWatch {
  private readonly clients: RedisClient[] = [];
  private watching: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly wake: WakeChannel,
    private readonly queues: readonly string[],
    /** An ownership broadcast was read, or the stream was placed late: read the ledger's ownership. */
    private readonly onOwnership: () => void,
  ) {}

  /**
   * The newest entry of each queue's control stream, read on the channel's
   * command connection (waiting briefly for its first connection): the watch
   * reads what comes after. A queue whose place cannot be read now (Redis
   * away) is left out; the watch takes it once Redis answers.
   */
  async positions(): Promise<Map<string, string>> {
    const from = new Map<string, string>();
    if (!(await this.wake.usable())) return from;
    await Promise.all(
      this.queues.map(async (queue) => {
        const id = await this.wake.control.latestId(this.wake.redis, queue).catch(() => undefined);
        if (id !== undefined) from.set(queue, id);
      }),
    );
    return from;
  }

  /**
   * Reads the streams (plain XREAD) from `from`. One blocking reader per
   * single-slot group of queues (all of them on a plain Redis; on a cluster a
   * multi-slot XREAD is CROSSSLOT).
   */
  start(from: ReadonlyMap<string, string>): void {
    const groups = this.wake.control.readGroups([...this.queues], this.wake.cluster);
    this.watching = Promise.all(groups.map((queues) => this.watchGroup(queues, from))).then(() => undefined);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const c of this.clients) c.disconnect();
    await this.watching;
  }

  private async watchGroup(queues: readonly string[], from: ReadonlyMap<string, string>): Promise<void> {
    const client = createRedisClient(this.wake.options.redis, 'lanewake:supervisor:control', 'blocking');
    this.clients.push(client);
    const after = new Map<string, string>();
    for (const queue of queues) {
      const id = from.get(queue);
      if (id !== undefined) after.set(queue, id);
    }
    while (!this.stopped) {
      try {
        if (!(await whenReady(client, 1000))) throw new Error('redis is not connected');
        let placed = false;
        for (const queue of queues) {
          if (after.has(queue)) continue;
          after.set(queue, await this.wake.control.latestId(client, queue));
          placed = true;
        }
        // Placed late (Redis was away at start): an activation broadcast before now is read from the ledger.
        if (placed) this.onOwnership();
        const entries = await this.wake.control.read(client, after, 1000);
        for (const e of entries) {
          after.set(e.queue, e.entryId);
          if (e.message.type === 'ownership') this.onOwnership();
        }
      } catch {
        if (this.stopped) break;
        await sleep(500);
      }
    }
  }
}
