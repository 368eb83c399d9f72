/** Follow-up wake-ups: a consumer saturated with work left over passes a wake-up on, so an idle replica joins in. */
import type { WakeChannel } from '../wake/wake-channel.js';
import type { WakeReader } from '../wake/wake-reader.js';
import type { ConsumerCounters } from './counters.js';
import type { ConsumerSettings } from './options.js';

const FOLLOW_UP_MIN_INTERVAL_MS = 20;

/** One consumer's follow-up wake-ups: at most one per FOLLOW_UP_MIN_INTERVAL_MS, none while Redis is away. */
export class FollowUps {
  private lastAt = 0;

  constructor(
    private readonly wake: Pick<WakeChannel, 'publish'>,
    /** Its wake reader: whether Redis is there. */
    private readonly reader: Pick<WakeReader, 'redisUp'>,
    private readonly settings: Pick<ConsumerSettings, 'queue' | 'classes'>,
    private readonly counters: Pick<ConsumerCounters, 'followUpWakes'>,
  ) {}

  async send(): Promise<void> {
    if (!this.reader.redisUp) return;
    const now = Date.now();
    if (now - this.lastAt < FOLLOW_UP_MIN_INTERVAL_MS) return;
    this.lastAt = now;
    this.counters.followUpWakes++;
    const queueClass = this.settings.classes[0] ?? 'default';
    await this.wake.publish([{ queue: this.settings.queue, queueClass, kind: 'advance', ids: [] }]);
  }
}
