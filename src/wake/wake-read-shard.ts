import type { Redis } from 'ioredis';
import { Latch } from '../latch.js';
import { sleep } from '../sleep.js';
import { groupBy } from '../group-by.js';
import { connectionId, createRedisClient, unblockClient, whenReady, type RedisClient } from './redis.js';
import type { WakeEntry } from './messages.js';
import { readGroupStreams, type GroupReadReply } from './streams.js';
import type { HubChannel, HubMember } from './hub-types.js';

const READ_RETRY_MS = 500;
const NO_ROOM_WAIT_MS = 1000;
/**
 * How many times one interrupt sends CLIENT UNBLOCK, 2 ms apart: a read sent but not yet blocking on the
 * server cannot be unblocked.
 */
export const UNBLOCK_TRIES = 50;

/**
 * Most wake streams one blocking read names. Redis checks every named
 * stream on each call and on each wake-up, so a read of 600 streams cost
 * about 0.25 ms of Redis per call and added 1.5–2 ms to a job's start
 * (bench:queues, 200 queues); a process serving more has one read per 64.
 */
export const MAX_STREAMS_PER_READ = 64;

/** What a shard needs of its hub. */
export interface ShardHost {
  readonly channel: HubChannel;
  /** The hub's name in every group. */
  readonly name: string;
  /** Whether reads may be cut short (a plain Redis hub serving several queues). */
  readonly interruptible: boolean;
  markUp(): void;
  markDown(error: unknown): void;
}

/**
 * One blocking XREADGROUP connection of a hub, reading the wake streams of
 * its members that have room, and handing each entry to a member of its
 * queue (the one with the most room first).
 */
export class WakeReadShard {
  readonly members = new Set<HubMember>();
  private readonly roomChanged = new Latch();
  private connection: RedisClient | undefined;
  private connectionId: number | undefined;
  /** Members the read in flight names; undefined while none is in flight. */
  private reading: ReadonlySet<HubMember> | undefined;
  private readonly interruption = new ReadInterrupt(
    () => this.host.channel.redis as Redis,
    () => (this.reading !== undefined && this.running ? this.connectionId : undefined),
  );
  private currentRead: Promise<unknown> = Promise.resolve();
  private running = false;
  private loop: Promise<void> = Promise.resolve();

  constructor(private readonly host: ShardHost) {}

  /** Streams its members read. */
  streamCount(): number {
    let n = 0;
    for (const m of this.members) n += m.streams.streamKeys().length;
    return n;
  }

  add(member: HubMember): void {
    this.members.add(member);
    if (!this.running) this.start();
    this.notify();
  }

  /** Removes a member; once it returns, no read in flight names the member. The last one out closes the connection. */
  async remove(member: HubMember): Promise<void> {
    if (!this.members.delete(member)) return;
    if (this.members.size === 0) return this.stop();
    if (this.reading?.has(member)) await this.interrupt();
    await this.currentRead.catch(() => undefined);
  }

  /** A member's room changed: read for it now, cutting short a read that does not name it. */
  notify(): void {
    this.roomChanged.notify();
    const reading = this.reading;
    if (reading === undefined) return;
    for (const m of this.members) {
      if (!reading.has(m) && m.subscriber.readRoom() > 0) {
        void this.interrupt();
        return;
      }
    }
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.roomChanged.notify();
    this.connection?.disconnect();
    await this.loop.catch(() => undefined);
    this.connection = undefined;
  }

  private start(): void {
    this.running = true;
    const connection = createRedisClient(
      this.host.channel.options.redis,
      `lanewake:wake:${this.host.name}`,
      'blocking',
    );
    // A reconnected connection has a new id.
    connection.on('close', () => (this.connectionId = undefined));
    this.connection = connection;
    this.loop = this.readLoop();
  }

  private interrupt(): Promise<void> {
    return this.host.interruptible ? this.interruption.run() : Promise.resolve();
  }

  /** XREADGROUP for the members that have room: a saturated replica leaves wake-ups to idle ones. */
  private async readLoop(): Promise<void> {
    const { channel } = this.host;
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
      const connection = this.connection;
      try {
        if (!connection || !(await whenReady(connection, 1000)) || !(await channel.usable()))
          throw new Error('redis is not connected');
        for (const m of rooms.keys()) {
          if (m.groupReady) continue;
          await m.streams.ensureGroup(channel.redis);
          m.groupReady = true;
        }
        if (this.host.interruptible && this.connectionId === undefined)
          this.connectionId = await connectionId(connection as Redis);
        const { keys, count, blockMs } = readShape(rooms);
        this.reading = new Set(rooms.keys());
        const read = readGroupStreams(connection, this.host.name, keys, count, blockMs);
        this.currentRead = read;
        const reply = await read.finally(() => (this.reading = undefined));
        this.host.markUp();
        if (reply.length > 0) this.deliver(rooms, reply);
      } catch (error) {
        this.reading = undefined;
        if (!this.running) break;
        if (String((error as Error).message).includes('NOGROUP')) for (const m of rooms.keys()) m.groupReady = false;
        this.host.markDown(error);
        await this.roomChanged.wait(READ_RETRY_MS);
      }
    }
  }

  /** Each entry to a member of its queue that was read for, the one with the most room left first. */
  private deliver(rooms: ReadonlyMap<HubMember, number>, reply: GroupReadReply): void {
    const left = new Map(rooms);
    const dealt: { to: HubMember; e: WakeEntry }[] = [];
    const seen = new Set<string>();
    for (const m of rooms.keys()) {
      for (const e of m.streams.entriesOf(reply)) {
        const key = `${e.stream}#${e.entryId}`;
        if (seen.has(key)) continue;
        seen.add(key);
        let best: HubMember | undefined;
        for (const [candidate, room] of left) {
          if (!this.members.has(candidate) || !candidate.streams.covers(e.stream)) continue;
          if (best === undefined || room > (left.get(best) ?? 0)) best = candidate;
        }
        if (best === undefined) continue;
        left.set(best, (left.get(best) ?? 0) - 1);
        dealt.push({ to: best, e });
      }
    }
    for (const [m, entries] of groupBy(dealt, (d) => d.to)) m.subscriber.onEntries(entries.map((d) => d.e));
  }
}

/**
 * Ends the blocking read of connection `idOf()` (CLIENT UNBLOCK, sent on
 * `via()`), so the next read names what changed. Retried briefly: a read
 * sent but not yet blocking on the server cannot be unblocked. `idOf`
 * answers undefined once no read is in flight. One at a time: room changes
 * with every slot that frees, and an interrupt per change would send its
 * own CLIENT UNBLOCKs to end the same read; a call while one runs gets that
 * one.
 */
export class ReadInterrupt {
  private inFlight: Promise<void> | undefined;

  constructor(
    private readonly via: () => Redis,
    private readonly idOf: () => number | undefined,
  ) {}

  run(): Promise<void> {
    this.inFlight ??= this.unblock().finally(() => (this.inFlight = undefined));
    return this.inFlight;
  }

  private async unblock(): Promise<void> {
    for (let i = 0; i < UNBLOCK_TRIES; i++) {
      const id = this.idOf();
      if (id === undefined) return;
      if (await unblockClient(this.via(), id).catch(() => false)) return;
      await sleep(2);
    }
  }
}

/**
 * The streams one read names (each once), entries per stream (the most room any queue has), and the
 * shortest block asked for.
 */
function readShape(rooms: ReadonlyMap<HubMember, number>): { keys: string[]; count: number; blockMs: number } {
  const roomByKey = new Map<string, number>();
  let blockMs = Number.POSITIVE_INFINITY;
  for (const [m, room] of rooms) {
    blockMs = Math.min(blockMs, m.readBlockMs);
    for (const k of m.streams.streamKeys()) roomByKey.set(k, (roomByKey.get(k) ?? 0) + room);
  }
  return { keys: [...roomByKey.keys()], count: Math.max(...roomByKey.values()), blockMs };
}
