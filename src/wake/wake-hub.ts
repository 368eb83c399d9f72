import type { Logger } from '../log.js';
import { sleep } from '../sleep.js';
import { groupBy } from '../group-by.js';
import { CONTROL_PER_READ } from './control.js';
import type { HubChannel, HubMember } from './hub-types.js';
import type { WakeEntry } from './messages.js';
import { createRedisClient, whenReady, type RedisClient } from './redis.js';
import { groupBySlot } from './slots.js';
import { readGroupNow, type GroupReadReply } from './streams.js';

export type { HubChannel, HubMember, WakeSubscriber } from './hub-types.js';

const READ_RETRY_MS = 500;
/**
 * How long the doorbell connection may take to come up while Redis is not known to be down: a new connection on a
 * busy host can take over a second, and taking that for an outage logged one and swept at the outage pace.
 */
const CONNECTING_GRACE_MS = 5_000;
/** Once Redis is known to be down: how long each try waits for it to answer again. */
const DOWN_READY_MS = 1_000;
/**
 * Most streams one non-blocking read names on a plain Redis: Redis looks at each named stream once per call, so
 * a burst of rings for thousands of queues is read in a few calls of bounded size rather than one huge one.
 */
const STREAMS_PER_READ = 256;

export interface WakeHubOptions {
  /** The hub's name in every queue's consumer group. */
  name: string;
  log: Logger;
}

/** Queues due a read, each with the number of the last ring that named it (a ring during a read keeps it due). */
type Due = Map<string, number>;

/**
 * The one blocking reader of a process (docs/design/wake.md, "One blocking read"): one XREAD of the prefix's
 * doorbell (doorbell.ts), on one connection, however many queues its members serve. A ring names queues; the
 * hub then reads those queues' wake streams (as the group's consumer `name`) for members with room, and their
 * control streams, without blocking, on the channel's command connection, a few calls per burst. A member that
 * joins or finds room is read for at once the same way. Redis health goes to all members.
 */
export class WakeHub {
  private readonly members = new Set<HubMember>();
  private readonly byQueue = new Map<string, Set<HubMember>>();
  /** Queues whose wake streams may hold entries not read yet. */
  private readonly wakeDue: Due = new Map();
  /** Queues whose control streams may hold entries not read yet. */
  private readonly controlDue: Due = new Map();
  private readonly controlAfter = new Map<string, string>();
  private rings = 0;
  private doorbellAfter: string | undefined;
  private connection: RedisClient | undefined;
  private running = false;
  private down = false;
  /** Settles once the doorbell position is known: a read for a member comes after it, so no ring falls between. */
  private started: Promise<void> = Promise.resolve();
  private loopDone: Promise<void> = Promise.resolve();
  private reading: Promise<void> | undefined;
  private readAgain = false;

  constructor(
    readonly channel: HubChannel,
    private readonly options: WakeHubOptions,
  ) {}

  get name(): string {
    return this.options.name;
  }

  get redisUp(): boolean {
    return !this.down;
  }

  /**
   * Adds a member: its group, its control position and the doorbell's are set before it returns, and its
   * streams are due a read, so nothing published from here on is missed.
   */
  async join(member: HubMember): Promise<void> {
    const redis = this.channel.redis;
    if (await this.channel.usable()) {
      await member.streams.ensureGroup(redis).then(
        () => (member.groupReady = true),
        () => undefined,
      );
      if (!this.controlAfter.has(member.queue)) {
        const after = await this.channel.control.latestId(redis, member.queue).catch(() => undefined);
        if (after !== undefined) this.controlAfter.set(member.queue, after);
      }
    }
    this.members.add(member);
    let mates = this.byQueue.get(member.queue);
    if (!mates) this.byQueue.set(member.queue, (mates = new Set()));
    mates.add(member);
    if (!this.running) this.start();
    // What was published before the doorbell's position was taken rang before it: read once, after that position.
    // Not awaited: under load a pass may run on and on, and a consumer's start must not wait for it to end.
    this.due(this.wakeDue, member.queue);
    this.due(this.controlDue, member.queue);
    await this.started;
    void this.readDue();
  }

  /** Removes a member; the last one out stops the doorbell read and closes its connection. */
  async leave(member: HubMember): Promise<void> {
    if (!this.members.delete(member)) return;
    const mates = this.byQueue.get(member.queue);
    mates?.delete(member);
    if (mates?.size === 0) {
      this.byQueue.delete(member.queue);
      this.wakeDue.delete(member.queue);
      this.controlDue.delete(member.queue);
      this.controlAfter.delete(member.queue);
    }
    if (this.members.size === 0) await this.stop();
    const shared = [...this.members].some((m) => m.streams.streamKeys().some((k) => member.streams.covers(k)));
    // Entries read for it and not acknowledged go with it (the sweep covers them).
    if (!shared) await member.streams.removeConsumer(this.channel.redis, this.name).catch(() => undefined);
  }

  /** A member's room changed: queues still due are read for the members that have room now. */
  notify(): void {
    if (this.wakeDue.size > 0 && this.running) void this.readDue();
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

  private markUp(): void {
    if (!this.down) return;
    this.down = false;
    this.options.log.info('redis is back: sweeping now, wake-ups resume');
    for (const m of this.members) m.subscriber.onRedisHealth(true);
  }

  private markDown(error: unknown): void {
    if (this.down) return;
    this.down = true;
    this.options.log.warn(
      { err: (error as Error).message },
      'redis unreachable: sweeping the ledger every redisDownPollMs',
    );
    for (const m of this.members) m.subscriber.onRedisHealth(false);
  }

  private due(map: Due, queue: string): void {
    if (this.byQueue.has(queue)) map.set(queue, ++this.rings);
  }

  private start(): void {
    this.running = true;
    this.connection = createRedisClient(this.channel.options.redis, `lanewake:wake:${this.name}`, 'blocking');
    this.channel.redis.on('ready', this.onCommandConnectionReady);
    this.started = this.channel.doorbell.latestId(this.channel.redis).then(
      (id) => void (this.doorbellAfter ??= id),
      () => undefined,
    );
    this.loopDone = this.started.then(() => this.doorbellLoop());
  }

  private async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.connection?.disconnect();
    await Promise.allSettled([this.loopDone, this.reading]);
    this.channel.redis.off('ready', this.onCommandConnectionReady);
    this.connection = undefined;
    this.doorbellAfter = undefined;
  }

  private readonly onCommandConnectionReady = (): void => {
    if (!this.down || !this.running) return;
    // An emptied Redis lost the groups: join them again before the next read. Rings may have been lost: read all.
    for (const m of this.members) m.groupReady = false;
    for (const q of this.byQueue.keys()) this.due(this.wakeDue, q);
    this.markUp();
    void this.readDue();
  };

  /** The one blocking read: rings after the last one heard, each marking its queues due a read. */
  private async doorbellLoop(): Promise<void> {
    while (this.running) {
      const connection = this.connection;
      try {
        const readyWithinMs = this.down ? DOWN_READY_MS : CONNECTING_GRACE_MS;
        if (!connection || !(await whenReady(connection, readyWithinMs))) throw new Error('redis is not connected');
        this.doorbellAfter ??= await this.channel.doorbell.latestId(this.channel.redis);
        const blockMs = Math.min(...[...this.members].map((m) => m.readBlockMs), 60_000);
        const rings = await this.channel.doorbell.read(connection, this.doorbellAfter, blockMs);
        this.doorbellAfter = rings.lastId;
        this.markUp();
        for (const q of rings.wake) this.due(this.wakeDue, q);
        for (const q of rings.control) this.due(this.controlDue, q);
        // Also after an empty read: what a failed read left due is tried again.
        if (this.wakeDue.size + this.controlDue.size > 0) void this.readDue();
      } catch (error) {
        if (!this.running) break;
        this.markDown(error);
        await sleep(READ_RETRY_MS);
      }
    }
  }

  /** Reads what is due, one pass at a time; a call during a pass makes one more pass after it. */
  private readDue(): Promise<void> {
    if (this.reading) {
      this.readAgain = true;
      return this.reading;
    }
    const pass = async (): Promise<void> => {
      await this.started;
      do {
        this.readAgain = false;
        if (!this.running) return;
        await Promise.all([this.readControl(), this.readWake()]);
      } while (this.readAgain);
    };
    this.reading = pass().finally(() => (this.reading = undefined));
    return this.reading;
  }

  /** Due wake streams of the members with room: a saturated member leaves its wake-ups to idle ones elsewhere. */
  private async readWake(): Promise<void> {
    const rooms = new Map<HubMember, number>();
    const asOf = new Map<string, number>();
    for (const [queue, ring] of this.wakeDue) {
      for (const m of this.byQueue.get(queue) ?? []) {
        const room = m.subscriber.readRoom();
        if (room <= 0) continue;
        rooms.set(m, room);
        asOf.set(queue, ring);
      }
    }
    if (rooms.size === 0) return;
    try {
      for (const m of rooms.keys()) {
        if (m.groupReady) continue;
        await m.streams.ensureGroup(this.channel.redis);
        m.groupReady = true;
      }
    } catch (error) {
      this.markDown(error);
      return;
    }
    // A queue's members stay in one part (one read of its streams); on a cluster a part is one slot.
    const byQueue = [...groupBy([...rooms.keys()], (m) => m.queue).values()];
    const parts = this.channel.cluster
      ? groupBySlot(byQueue, (ms) => ms[0]!.streams.streamKeys()[0]!)
      : chunks(byQueue, (ms) => ms[0]!.streams.streamKeys().length, STREAMS_PER_READ);
    await Promise.all(
      parts.map((part) => this.readWakePart(new Map(part.flat().map((m) => [m, rooms.get(m)!])), asOf)),
    );
  }

  private async readWakePart(rooms: ReadonlyMap<HubMember, number>, asOf: ReadonlyMap<string, number>) {
    const { keys, count } = readShape(rooms);
    let reply: GroupReadReply;
    try {
      reply = await readGroupNow(this.channel.redis, this.name, keys, count);
    } catch (error) {
      if (String((error as Error).message).includes('NOGROUP')) for (const m of rooms.keys()) m.groupReady = false;
      else this.markDown(error);
      return;
    }
    // A stream that gave all it was asked for may hold more: its queue stays due.
    const full = new Set(reply.filter(([, entries]) => entries.length >= count).map(([key]) => key));
    for (const m of rooms.keys()) {
      if (m.streams.streamKeys().some((k) => full.has(k))) continue;
      if (this.wakeDue.get(m.queue) === asOf.get(m.queue)) this.wakeDue.delete(m.queue);
    }
    if (reply.length > 0) this.deliver(rooms, reply);
  }

  /** Due control streams, from each queue's last entry seen: every member of the queue gets each message. */
  private async readControl(): Promise<void> {
    const asOf = new Map([...this.controlDue].filter(([q]) => this.byQueue.has(q)));
    if (asOf.size === 0) return;
    const { control, redis, cluster } = this.channel;
    const queues = [...asOf.keys()];
    const parts = cluster ? control.readGroups(queues, true) : chunks(queues, () => 1, STREAMS_PER_READ);
    try {
      for (const q of queues) if (!this.controlAfter.has(q)) this.controlAfter.set(q, await control.latestId(redis, q));
      await Promise.all(
        parts.map(async (part) => {
          const entries = await control.read(redis, new Map(part.map((q) => [q, this.controlAfter.get(q) ?? '0-0'])));
          const read = new Map<string, number>();
          for (const e of entries) {
            const mates = this.byQueue.get(e.queue);
            if (!mates) continue;
            this.controlAfter.set(e.queue, e.entryId);
            read.set(e.queue, (read.get(e.queue) ?? 0) + 1);
            for (const m of mates) m.subscriber.onControl(e.message);
          }
          for (const q of part) {
            if ((read.get(q) ?? 0) >= CONTROL_PER_READ) this.readAgain = true;
            else if (this.controlDue.get(q) === asOf.get(q)) this.controlDue.delete(q);
          }
        }),
      );
    } catch (error) {
      this.markDown(error);
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

/** `items` in runs whose sizes (`size` each) add up to at most `max` (an item larger than `max` alone). */
function chunks<T>(items: readonly T[], size: (item: T) => number, max: number): T[][] {
  const out: T[][] = [];
  let run: T[] = [];
  let total = 0;
  for (const item of items) {
    const n = size(item);
    if (run.length > 0 && total + n > max) {
      out.push(run);
      run = [];
      total = 0;
    }
    run.push(item);
    total += n;
  }
  if (run.length > 0) out.push(run);
  return out;
}

/** The streams one read names (each once) and entries per stream (the most room any of its queues' members has). */
function readShape(rooms: ReadonlyMap<HubMember, number>): { keys: string[]; count: number } {
  const roomByKey = new Map<string, number>();
  for (const [m, room] of rooms) {
    for (const k of m.streams.streamKeys()) roomByKey.set(k, (roomByKey.get(k) ?? 0) + room);
  }
  return { keys: [...roomByKey.keys()], count: Math.max(...roomByKey.values()) };
}
