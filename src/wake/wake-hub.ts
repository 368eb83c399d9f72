import type { Redis } from 'ioredis';
import { Latch } from '../latch.js';
import type { Logger } from '../log.js';
import { sleep } from '../sleep.js';
import type { ControlMessage, ControlStreams } from './control.js';
import { connectionId, createRedisClient, unblockClient, whenReady, type RedisClient, type RedisTarget } from './redis.js';
import { readGroupStreams, type WakeEntry, type WakeStreams } from './streams.js';

const READ_RETRY_MS = 500;
const NO_ROOM_WAIT_MS = 1000;
/** Tries of CLIENT UNBLOCK for a read sent but not yet blocking on the server. */
const UNBLOCK_TRIES = 50;

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

/** What a hub uses of its wake channel. */
export interface HubChannel {
  readonly redis: RedisClient;
  readonly cluster: boolean;
  readonly control: ControlStreams;
  readonly options: { readonly redis: RedisTarget };
  usable(): Promise<boolean>;
}

/** One queue's reader as the hub sees it. */
export interface HubMember {
  queue: string;
  streams: WakeStreams;
  readBlockMs: number;
  subscriber: WakeSubscriber;
  /** Whether the queue's group exists on its streams (false again after Redis lost its data). */
  groupReady: boolean;
  /** When its idle entries were last looked for (takeOverIdle). */
  lastTakeOverAt?: number;
}

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
 * The blocking readers of one process: one XREADGROUP names the wake streams
 * of every member queue that has room, and one XREAD every member's control
 * stream, so a worker serving hundreds of queues holds two blocking
 * connections, not two per queue. Entries go to the members of their queue
 * (the one with the most room first); Redis health goes to all.
 */
export class WakeHub {
  private readonly members = new Set<HubMember>();
  private readonly controlAfter = new Map<string, string>();
  private readonly roomChanged = new Latch();
  private readonly controlChanged = new Latch();
  private wakeConnection: RedisClient | undefined;
  private controlConnection: RedisClient | undefined;
  private wakeConnectionId: number | undefined;
  private controlConnectionId: number | undefined;
  /** Members the wake read in flight names; undefined while none is in flight. */
  private reading: ReadonlySet<HubMember> | undefined;
  private currentRead: Promise<unknown> = Promise.resolve();
  private controlReading = false;
  private running = false;
  private down = false;
  private loops: Promise<void> = Promise.resolve();

  constructor(
    private readonly channel: HubChannel,
    private readonly options: WakeHubOptions,
  ) {}

  get name(): string {
    return this.options.name;
  }

  get redisUp(): boolean {
    return !this.down;
  }

  /** Adds a member: its group and its control position are set before it returns, so nothing published from here on is missed. */
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
    this.notify();
    this.controlChanged.notify();
    if (this.controlReading) void this.interrupt('control');
  }

  /** Removes a member; the last one out stops the loops and closes the connections. */
  async leave(member: HubMember): Promise<void> {
    if (!this.members.delete(member)) return;
    if (this.members.size === 0) {
      await this.stop();
    } else {
      if (this.reading?.has(member)) await this.interrupt('wake');
      await this.currentRead.catch(() => undefined);
    }
    if (![...this.members].some((m) => m.queue === member.queue)) this.controlAfter.delete(member.queue);
    const keys = new Set(member.streams.streamKeys());
    const shared = [...this.members].some((m) => m.streams.streamKeys().some((k) => keys.has(k)));
    // Entries read for it and not acknowledged go with it (the sweep covers them).
    if (!shared) await member.streams.removeConsumer(this.channel.redis, this.name).catch(() => undefined);
  }

  /** A member's room changed: read for it now, cutting short a read that does not name it. */
  notify(): void {
    this.roomChanged.notify();
    const reading = this.reading;
    if (reading === undefined) return;
    for (const m of this.members) {
      if (!reading.has(m) && m.subscriber.readRoom() > 0) {
        void this.interrupt('wake');
        return;
      }
    }
  }

  async ack(member: HubMember, entries: readonly WakeEntry[]): Promise<void> {
    if (entries.length === 0) return;
    await member.streams.ack(this.channel.redis, entries).catch(() => undefined);
  }

  /** Takes over entries of the member's queue that a stopped or stuck reader of the group left unacknowledged. */
  async takeOverIdle(member: HubMember, minIdleMs: number, count: number): Promise<void> {
    if (this.down || !member.groupReady) return;
    // An entry is taken over only once idle minIdleMs: looking more often than half that finds little more.
    const now = Date.now();
    if (now - (member.lastTakeOverAt ?? Number.NEGATIVE_INFINITY) < minIdleMs / 2) return;
    member.lastTakeOverAt = now;
    const stale = await member.streams.reclaimIdle(this.channel.redis, this.name, minIdleMs, count);
    if (stale.length > 0) member.subscriber.onEntries(stale);
  }

  private start(): void {
    this.running = true;
    this.wakeConnection = createRedisClient(this.channel.options.redis, `lanewake:wake:${this.name}`);
    this.controlConnection = createRedisClient(this.channel.options.redis, `lanewake:control:${this.name}`);
    // A reconnected connection has a new id.
    this.wakeConnection.on('close', () => (this.wakeConnectionId = undefined));
    this.controlConnection.on('close', () => (this.controlConnectionId = undefined));
    this.channel.redis.on('ready', this.onCommandConnectionReady);
    this.loops = Promise.all([this.readLoop(), this.controlLoop()]).then(() => undefined);
  }

  private async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.roomChanged.notify();
    this.controlChanged.notify();
    this.wakeConnection?.disconnect();
    this.controlConnection?.disconnect();
    await this.loops.catch(() => undefined);
    this.channel.redis.off('ready', this.onCommandConnectionReady);
    this.wakeConnection = undefined;
    this.controlConnection = undefined;
  }

  private readonly onCommandConnectionReady = (): void => {
    if (!this.down || !this.running) return;
    // An emptied Redis lost the groups: join them again before the next read.
    for (const m of this.members) m.groupReady = false;
    this.markUp();
  };

  private markUp(): void {
    if (!this.down) return;
    this.down = false;
    this.options.log.info('redis is back: sweeping now, wake-ups resume');
    for (const m of this.members) m.subscriber.onRedisHealth(true);
  }

  private markDown(error: unknown): void {
    if (this.down) return;
    this.down = true;
    this.options.log.warn({ err: (error as Error).message }, 'redis unreachable: sweeping the ledger every redisDownPollMs');
    for (const m of this.members) m.subscriber.onRedisHealth(false);
  }

  /**
   * Ends the blocking read in flight on `which` connection, so the next one
   * names what changed. Retried briefly: a read sent but not yet blocking on
   * the server cannot be unblocked.
   */
  private async interrupt(which: 'wake' | 'control'): Promise<void> {
    if (!this.options.shared || this.channel.cluster) return;
    const via = this.channel.redis as Redis;
    for (let i = 0; i < UNBLOCK_TRIES; i++) {
      const inFlight = which === 'wake' ? this.reading !== undefined : this.controlReading;
      const id = which === 'wake' ? this.wakeConnectionId : this.controlConnectionId;
      if (!inFlight || id === undefined || !this.running) return;
      if (await unblockClient(via, id).catch(() => false)) return;
      await sleep(2);
    }
  }

  /** XREADGROUP for the members that have room: a saturated replica leaves wake-ups to idle ones. */
  private async readLoop(): Promise<void> {
    while (this.running) {
      const rooms = new Map<HubMember, number>();
      for (const m of this.members) {
        const room = m.subscriber.readRoom();
        if (room > 0) rooms.set(m, room);
      }
      if (rooms.size === 0) {
        await this.roomChanged.wait(NO_ROOM_WAIT_MS);
        continue;
      }
      const connection = this.wakeConnection;
      try {
        if (!connection || !(await whenReady(connection, 1000)) || !(await this.channel.usable())) throw new Error('redis is not connected');
        for (const m of rooms.keys()) {
          if (m.groupReady) continue;
          await m.streams.ensureGroup(this.channel.redis);
          m.groupReady = true;
        }
        if (this.options.shared && !this.channel.cluster && this.wakeConnectionId === undefined) {
          this.wakeConnectionId = await connectionId(connection as Redis);
        }
        const { keys, count, blockMs } = readShape(rooms);
        this.reading = new Set(rooms.keys());
        const read = readGroupStreams(connection, this.name, keys, count, blockMs);
        this.currentRead = read;
        const reply = await read.finally(() => (this.reading = undefined));
        this.markUp();
        if (reply.length > 0) this.deliver(rooms, reply);
      } catch (error) {
        this.reading = undefined;
        if (!this.running) break;
        if (String((error as Error).message).includes('NOGROUP')) for (const m of rooms.keys()) m.groupReady = false;
        this.markDown(error);
        await this.roomChanged.wait(READ_RETRY_MS);
      }
    }
  }

  /** Each entry to a member of its queue that was read for, the one with the most room left first. */
  private deliver(rooms: Map<HubMember, number>, reply: Parameters<WakeStreams['entriesOf']>[0]): void {
    const left = new Map(rooms);
    const byMember = new Map<HubMember, WakeEntry[]>();
    const seen = new Set<string>();
    for (const m of rooms.keys()) {
      for (const e of m.streams.entriesOf(reply)) {
        const key = `${e.stream}#${e.entryId}`;
        if (seen.has(key)) continue;
        seen.add(key);
        let best: HubMember | undefined;
        for (const [candidate, room] of left) {
          if (!candidate.streams.streamKeys().includes(e.stream) || !this.members.has(candidate)) continue;
          if (best === undefined || room > (left.get(best) ?? 0)) best = candidate;
        }
        if (best === undefined) continue;
        left.set(best, (left.get(best) ?? 0) - 1);
        byMember.set(best, [...(byMember.get(best) ?? []), e]);
      }
    }
    for (const [m, entries] of byMember) m.subscriber.onEntries(entries);
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
          await this.controlChanged.wait(NO_ROOM_WAIT_MS);
          continue;
        }
        if (this.options.shared && !this.channel.cluster && this.controlConnectionId === undefined) {
          this.controlConnectionId = await connectionId(connection as Redis);
        }
        const blockMs = Math.min(...[...this.members].map((m) => m.readBlockMs));
        this.controlReading = true;
        const entries = await this.channel.control.read(connection, after, blockMs).finally(() => (this.controlReading = false));
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

/** The streams one read names (each once), entries per stream (the most room any queue has), and the shortest block asked for. */
function readShape(rooms: ReadonlyMap<HubMember, number>): { keys: string[]; count: number; blockMs: number } {
  const roomByKey = new Map<string, number>();
  let blockMs = Number.POSITIVE_INFINITY;
  for (const [m, room] of rooms) {
    blockMs = Math.min(blockMs, m.readBlockMs);
    for (const k of m.streams.streamKeys()) roomByKey.set(k, (roomByKey.get(k) ?? 0) + room);
  }
  return { keys: [...roomByKey.keys()], count: Math.max(...roomByKey.values()), blockMs };
}
