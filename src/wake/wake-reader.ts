import type { QueueClass } from '../ledger/types.js';
import type { Logger } from '../log.js';
import { Latch } from '../latch.js';
import { sleep } from '../sleep.js';
import type { ControlMessage } from './control.js';
import { createRedisClient, whenReady, type RedisClient } from './redis.js';
import type { WakeEntry, WakeStreams } from './streams.js';
import type { WakeChannel } from './wake-channel.js';

/** Entries another reader of the group read and never acknowledged are taken over after this long. */
const IDLE_WAKE_ENTRY_MS = 30_000;
const RECLAIM_BATCH = 100;
const READ_RETRY_MS = 500;
const NO_ROOM_WAIT_MS = 1000;

/**
 * What a wake reader tells the one who reads through it (a consumer): which
 * items were named, when to look, what the control stream said, and whether
 * Redis is there. It never learns what a consumer does with them.
 */
export interface WakeSubscriber {
  /** How many wake entries it can act on now (free slots); 0 stops reading until notify(). */
  readRoom(): number;
  /** Entries read from the queue's streams. Acknowledge them with `ack` once acted on. */
  onEntries(entries: readonly WakeEntry[]): void;
  /** A message on the queue's control stream (every process sees each one). */
  onControl(message: ControlMessage): void;
  /** Redis went away (`false`) or came back (`true`): sweep the ledger faster meanwhile, now on return. */
  onRedisHealth(up: boolean): void;
}

export interface WakeReaderOptions {
  queue: string;
  classes: readonly QueueClass[];
  /** The reader's name in the consumer group (the consumer's name). */
  name: string;
  /** How long one XREAD blocks. */
  readBlockMs: number;
  log: Logger;
}

/**
 * One consumer's reader of its queue's wake streams (as a member of the
 * queue's consumer group) and control stream (as a plain reader). It owns the
 * two blocking connections, the group, the acknowledgements and the view of
 * Redis health; it reads only while its subscriber has room.
 */
export class WakeReader {
  private readonly streams: WakeStreams;
  private readonly wakeConnection: RedisClient;
  private readonly controlConnection: RedisClient;
  private readonly roomChanged = new Latch();
  private running = false;
  private down = false;
  private groupReady = false;
  private loops: Promise<void> = Promise.resolve();

  constructor(
    private readonly channel: WakeChannel,
    private readonly options: WakeReaderOptions,
    private readonly subscriber: WakeSubscriber,
  ) {
    this.streams = channel.streamsOf(options.queue, options.classes);
    this.wakeConnection = createRedisClient(channel.options.redis, `lanewake:wake:${options.name}`);
    this.controlConnection = createRedisClient(channel.options.redis, `lanewake:control:${options.name}`);
  }

  /** False while the last read (or command) found Redis away. */
  get redisUp(): boolean {
    return !this.down;
  }

  /** Joins the group (so no wake-up published from here on is missed), then starts reading. */
  async start(): Promise<void> {
    if (await this.channel.usable()) {
      await this.streams.ensureGroup(this.channel.redis).then(
        () => (this.groupReady = true),
        () => undefined,
      );
    }
    this.running = true;
    // Notice Redis coming back on the command connection at once, not at the next read.
    this.channel.redis.on('ready', this.onCommandConnectionReady);
    this.loops = Promise.all([this.readLoop(), this.controlLoop()]).then(() => undefined);
  }

  /** The subscriber's room changed: a reader waiting for room reads again. */
  notify(): void {
    this.roomChanged.notify();
  }

  /** Settles when both loops have ended. */
  whenStopped(): Promise<void> {
    return this.loops;
  }

  async ack(entries: readonly WakeEntry[]): Promise<void> {
    if (entries.length === 0) return;
    await this.streams.ack(this.channel.redis, entries).catch(() => undefined);
  }

  /** Takes over entries a stopped or stuck reader of the group left unacknowledged. */
  async takeOverIdle(): Promise<void> {
    if (this.down || !this.groupReady) return;
    const stale = await this.streams.reclaimIdle(this.channel.redis, this.options.name, IDLE_WAKE_ENTRY_MS, RECLAIM_BATCH);
    if (stale.length > 0) this.subscriber.onEntries(stale);
  }

  /** Stops reading (the blocking reads end at once) and leaves the group. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.roomChanged.notify();
    this.wakeConnection.disconnect();
    this.controlConnection.disconnect();
    await this.loops.catch(() => undefined);
    this.channel.redis.off('ready', this.onCommandConnectionReady);
    await this.streams.removeConsumer(this.channel.redis, this.options.name).catch(() => undefined);
  }

  private readonly onCommandConnectionReady = (): void => {
    if (!this.down || !this.running) return;
    // An emptied Redis lost the group: join it again before the next read.
    this.groupReady = false;
    this.markUp();
  };

  private markUp(): void {
    if (!this.down) return;
    this.down = false;
    this.options.log.info('redis is back: sweeping now, wake-ups resume');
    this.subscriber.onRedisHealth(true);
  }

  private markDown(error: unknown): void {
    if (this.down) return;
    this.down = true;
    this.options.log.warn({ err: (error as Error).message }, 'redis unreachable: sweeping the ledger every redisDownPollMs');
    this.subscriber.onRedisHealth(false);
  }

  /** XREADGROUP only while the subscriber has room: a saturated replica leaves wake-ups to idle ones. */
  private async readLoop(): Promise<void> {
    while (this.running) {
      const room = this.subscriber.readRoom();
      if (room <= 0) {
        await this.roomChanged.wait(NO_ROOM_WAIT_MS);
        continue;
      }
      try {
        if (!(await whenReady(this.wakeConnection, 1000)) || !(await this.channel.usable())) throw new Error('redis is not connected');
        if (!this.groupReady) {
          await this.streams.ensureGroup(this.channel.redis);
          this.groupReady = true;
        }
        const entries = await this.streams.read(this.wakeConnection, this.options.name, room, this.options.readBlockMs);
        this.markUp();
        if (entries.length > 0) this.subscriber.onEntries(entries);
      } catch (error) {
        if (!this.running) break;
        if (String((error as Error).message).includes('NOGROUP')) this.groupReady = false;
        this.markDown(error);
        await this.roomChanged.wait(READ_RETRY_MS);
      }
    }
  }

  /** Plain XREAD of the queue's control stream, from the newest entry at start. */
  private async controlLoop(): Promise<void> {
    const queue = this.options.queue;
    let after: string | undefined;
    while (this.running) {
      try {
        if (!(await whenReady(this.controlConnection, 1000))) throw new Error('redis is not connected');
        after ??= await this.channel.control.latestId(this.controlConnection, queue);
        const entries = await this.channel.control.read(this.controlConnection, new Map([[queue, after]]), this.options.readBlockMs);
        for (const e of entries) {
          after = e.entryId;
          this.subscriber.onControl(e.message);
        }
      } catch {
        if (!this.running) break;
        await sleep(READ_RETRY_MS);
      }
    }
  }
}
