import type { Redis } from 'ioredis';
import { Latch } from '../latch.js';
import type { Logger } from '../log.js';
import { sleep } from '../sleep.js';
import type { HubChannel, HubMember } from './hub-types.js';
import { connectionId, createRedisClient, whenReady, type RedisClient } from './redis.js';
import type { WakeEntry } from './messages.js';
import { MAX_STREAMS_PER_READ, ReadInterrupt, WakeReadShard, type ShardHost } from './wake-read-shard.js';

export type { HubChannel, HubMember, WakeSubscriber } from './hub-types.js';

const READ_RETRY_MS = 500;
const NO_MEMBERS_WAIT_MS = 1000;

export interface WakeHubOptions {
  /** The hub's name in every queue's consumer group. */
  name: string;
  /**
   * Whether a read may be cut short (CLIENT UNBLOCK) when a member joins or
   * finds room: needed when one read serves several members. Not on a
   * cluster, where a hub serves one queue.
   */
  shared: boolean;
  log: Logger;
}

/**
 * The blocking readers of one process: wake streams are read by shards of
 * at most MAX_STREAMS_PER_READ streams, each one XREADGROUP naming the
 * streams of every member queue that has room, and one XREAD names every
 * member's control stream. A worker serving hundreds of queues holds a few
 * blocking connections, not two per queue. Redis health goes to all members.
 */
export class WakeHub implements ShardHost {
  private readonly members = new Set<HubMember>();
  private readonly shards: WakeReadShard[] = [];
  private readonly shardOf = new Map<HubMember, WakeReadShard>();
  private readonly controlAfter = new Map<string, string>();
  private readonly controlChanged = new Latch();
  private controlConnection: RedisClient | undefined;
  private controlConnectionId: number | undefined;
  private controlReading = false;
  private readonly controlInterrupt = new ReadInterrupt(
    () => this.channel.redis as Redis,
    () => (this.controlReading && this.running ? this.controlConnectionId : undefined),
  );
  private running = false;
  private down = false;
  private controlLoopDone: Promise<void> = Promise.resolve();

  constructor(
    readonly channel: HubChannel,
    private readonly options: WakeHubOptions,
  ) {}

  get interruptible(): boolean {
    return this.options.shared && !this.channel.cluster;
  }

  get name(): string {
    return this.options.name;
  }

  get redisUp(): boolean {
    return !this.down;
  }

  /**
   * Adds a member: its group and its control position are set before it returns, so nothing
   * published from here on is missed.
   */
  async join(member: HubMember): Promise<void> {
    if (await this.channel.usable()) {
      await member.streams.ensureGroup(this.channel.redis).then(
        () => (member.groupReady = true),
        () => undefined,
      );
      if (!this.controlAfter.has(member.queue)) {
        const after = await this.channel.control.latestId(this.channel.redis, member.queue).catch(() => undefined);
        if (after !== undefined) this.controlAfter.set(member.queue, after);
      }
    }
    this.members.add(member);
    if (!this.running) this.start();
    const shard = this.shardFor(member);
    this.shardOf.set(member, shard);
    shard.add(member);
    this.controlChanged.notify();
    if (this.controlReading) void this.interruptControl();
  }

  /** Removes a member; the last one out stops the loops and closes the connections. */
  async leave(member: HubMember): Promise<void> {
    if (!this.members.delete(member)) return;
    const shard = this.shardOf.get(member);
    this.shardOf.delete(member);
    await shard?.remove(member);
    if (shard && shard.members.size === 0) this.shards.splice(this.shards.indexOf(shard), 1);
    if (this.members.size === 0) await this.stop();
    if (![...this.members].some((m) => m.queue === member.queue)) this.controlAfter.delete(member.queue);
    const shared = [...this.members].some((m) => m.streams.streamKeys().some((k) => member.streams.covers(k)));
    // Entries read for it and not acknowledged go with it (the sweep covers them).
    if (!shared) await member.streams.removeConsumer(this.channel.redis, this.name).catch(() => undefined);
  }

  /** A member's room changed: its shard reads for it now. */
  notify(): void {
    for (const shard of this.shards) shard.notify();
  }

  async ack(member: HubMember, entries: readonly WakeEntry[]): Promise<void> {
    if (entries.length === 0) return;
    await member.streams.ack(this.channel.redis, entries).catch(() => undefined);
  }

  /**
   * Takes over entries of the member's queue that a stopped or stuck reader of the group left unacknowledged
   * (idle `minIdleMs` or more, up to `count` per stream); when to is the sweeper's call (src/consumer/sweeper.ts).
   */
  async takeOverIdle(member: HubMember, minIdleMs: number, count: number): Promise<void> {
    if (this.down || !member.groupReady) return;
    const stale = await member.streams.reclaimIdle(this.channel.redis, this.name, minIdleMs, count);
    if (stale.length > 0) member.subscriber.onEntries(stale);
  }

  markUp(): void {
    if (!this.down) return;
    this.down = false;
    this.options.log.info('redis is back: sweeping now, wake-ups resume');
    for (const m of this.members) m.subscriber.onRedisHealth(true);
  }

  markDown(error: unknown): void {
    if (this.down) return;
    this.down = true;
    this.options.log.warn(
      { err: (error as Error).message },
      'redis unreachable: sweeping the ledger every redisDownPollMs',
    );
    for (const m of this.members) m.subscriber.onRedisHealth(false);
  }

  /**
   * The shard of the member's queue if another member reads it, else the first with room for
   * its streams, else a new one.
   */
  private shardFor(member: HubMember): WakeReadShard {
    const same = this.shards.find((s) => [...s.members].some((m) => m.queue === member.queue));
    if (same) return same;
    const need = member.streams.streamKeys().length;
    const roomy = this.shards.find((s) => s.streamCount() + need <= MAX_STREAMS_PER_READ);
    if (roomy) return roomy;
    const shard = new WakeReadShard(this);
    this.shards.push(shard);
    return shard;
  }

  private start(): void {
    this.running = true;
    const connection = createRedisClient(this.channel.options.redis, `lanewake:control:${this.name}`, 'blocking');
    // A reconnected connection has a new id.
    connection.on('close', () => (this.controlConnectionId = undefined));
    this.controlConnection = connection;
    this.channel.redis.on('ready', this.onCommandConnectionReady);
    this.controlLoopDone = this.controlLoop();
  }

  private async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.controlChanged.notify();
    this.controlConnection?.disconnect();
    await Promise.allSettled([this.controlLoopDone, ...this.shards.map((s) => s.stop())]);
    this.shards.length = 0;
    this.channel.redis.off('ready', this.onCommandConnectionReady);
    this.controlConnection = undefined;
  }

  private readonly onCommandConnectionReady = (): void => {
    if (!this.down || !this.running) return;
    // An emptied Redis lost the groups: join them again before the next read.
    for (const m of this.members) m.groupReady = false;
    this.markUp();
  };

  private async interruptControl(): Promise<void> {
    if (this.interruptible) await this.controlInterrupt.run();
  }

  /** Plain XREAD of every member queue's control stream, from the newest entry at its join. */
  private async controlLoop(): Promise<void> {
    while (this.running) {
      const connection = this.controlConnection;
      try {
        if (!connection || !(await whenReady(connection, 1000))) throw new Error('redis is not connected');
        const queues = new Set([...this.members].map((m) => m.queue));
        for (const q of queues) {
          if (!this.controlAfter.has(q)) this.controlAfter.set(q, await this.channel.control.latestId(connection, q));
        }
        const after = new Map([...queues].map((q) => [q, this.controlAfter.get(q) ?? '$']));
        if (after.size === 0) {
          await this.controlChanged.wait(NO_MEMBERS_WAIT_MS);
          continue;
        }
        if (this.interruptible && this.controlConnectionId === undefined)
          this.controlConnectionId = await connectionId(connection as Redis);
        const blockMs = Math.min(...[...this.members].map((m) => m.readBlockMs));
        this.controlReading = true;
        const entries = await this.channel.control
          .read(connection, after, blockMs)
          .finally(() => (this.controlReading = false));
        for (const e of entries) {
          if (this.controlAfter.has(e.queue)) this.controlAfter.set(e.queue, e.entryId);
          for (const m of this.members) if (m.queue === e.queue) m.subscriber.onControl(e.message);
        }
      } catch {
        if (!this.running) break;
        await sleep(READ_RETRY_MS);
      }
    }
  }
}
