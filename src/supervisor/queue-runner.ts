import { Consumer } from '../consumer/consumer.js';
import type { HandlerEntry } from '../consumer/types.js';
import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log.js';
import type { WakeChannel } from '../wake/wake-channel.js';
import { RestartBackoff } from './backoff.js';
import { poolSettings, type PoolPlan } from '../consumer/pools.js';
import { consumerSettingsOf, type QueueConfig } from './config.js';
import type { LiveSettings } from '../consumer/options.js';
import { sleep } from '../sleep.js';

export type RunnerState = 'starting' | 'running' | 'restarting' | 'stopped';

export interface QueueRunnerOptions {
  queue: QueueConfig;
  ledger: Ledger;
  wake: WakeChannel | undefined;
  handlers: Record<string, HandlerEntry<never>>;
  log: Logger;
  /** How long a stop (or a restart) lets the consumer's running handlers finish. */
  drainTimeoutMs: number;
  /** The ownership epoch to fence claims with, or undefined to claim unfenced. Re-read on every (re)start. */
  epoch: () => number | undefined;
  /**
   * Every consumer this runner starts, for metrics; the returned function detaches it once that consumer has stopped.
   */
  onConsumer?: (consumer: Consumer<never>) => (() => void) | void;
  backoff?: RestartBackoff;
  /**
   * The executor pool this runner's consumer is (docs/design/consumer.md, "Executor pools"): its classes,
   * slots and preferred tier.
   */
  pool?: PoolPlan | undefined;
}

/**
 * Keeps one consumer of one queue (or of one of its executor pools) running: a consumer whose loops end while
 * it should be running has crashed, so it is stopped (its in-flight work
 * drained or left to lease expiry) and a fresh one starts after a backoff of
 * 1 s doubling to 30 s, reset after a healthy minute. Never restarts during
 * shutdown.
 */
export class QueueRunner {
  state: RunnerState = 'starting';
  restarts = 0;
  current: Consumer<never> | undefined;
  private detach: (() => void) | void = undefined;
  private stopping = false;
  private signalStop: () => void = () => undefined;
  private readonly stopped = new Promise<void>((resolve) => {
    this.signalStop = resolve;
  });
  private loop: Promise<void> | undefined;
  private readonly backoff: RestartBackoff;
  /** Slots and fleet cap as last retuned (from the ledger or pinned): a restarted consumer starts with them. */
  private live: LiveSettings | undefined;
  /** The queue's key limit as last read; undefined before the first read. */
  private keyLimit: number | null | undefined;
  /** Reads left at which the consumer is kicked for a changed key limit. */
  private kicks = 0;

  constructor(private readonly options: QueueRunnerOptions) {
    this.backoff = options.backoff ?? new RestartBackoff();
  }

  /**
   * The queue's settings changed live (Supervisor's reconcile): the running consumer takes them now, a restarted
   * one starts with them. An executor pool keeps its own slots (its plan splits the queue's) and takes the cap.
   * A changed key limit is the ledger's own, whose write admits the waiting items: the consumer looks now and at
   * the next read rather than at its next sweep.
   */
  retune(live: LiveSettings, keyLimit: number | null): void {
    const next = this.options.pool === undefined ? live : { ...live, concurrency: this.options.pool.concurrency };
    // Kicked at this read and the next: this one may have seen the limit before the write's hand-on committed.
    if (this.keyLimit !== undefined && this.keyLimit !== keyLimit) this.kicks = 2;
    this.keyLimit = keyLimit;
    if (this.kicks > 0) {
      this.kicks--;
      this.current?.kick();
    }
    if (this.live?.concurrency === next.concurrency && this.live.maxProcessing === next.maxProcessing) return;
    this.live = next;
    this.current?.retune(next);
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.signalStop();
    await this.current?.stop();
    await this.loop;
    this.detach?.();
    this.state = 'stopped';
  }

  private async run(): Promise<void> {
    const { queue, log } = this.options;
    while (!this.stopping) {
      const startedAt = Date.now();
      const consumer = this.build();
      this.current = consumer;
      let reason = 'its loops ended';
      try {
        await consumer.start();
        this.state = 'running';
        await Promise.race([consumer.whenLoopsEnd(), this.stopped]);
      } catch (error) {
        reason = (error as Error).message;
      }
      if (this.stopping) break;
      this.state = 'restarting';
      this.restarts++;
      await consumer.stop().catch(() => undefined);
      this.detach?.();
      this.detach = undefined;
      const delay = this.backoff.delayAfter(Date.now() - startedAt);
      log.error(
        { queue: queue.name, reason, restartInMs: delay, restarts: this.restarts },
        'consumer crashed; restarting',
      );
      await Promise.race([sleep(delay), this.stopped]);
    }
  }

  private build(): Consumer<never> {
    const { queue, ledger, wake, handlers, log, drainTimeoutMs } = this.options;
    const epoch = this.options.epoch();
    const pool = this.options.pool;
    const consumer = new Consumer<never>({
      ...consumerSettingsOf(queue),
      ...(pool !== undefined ? poolSettings(pool) : {}),
      ...(this.live !== undefined ? this.live : {}),
      drainTimeoutMs,
      ledger,
      wake,
      handlers,
      logger: log,
      ...(epoch !== undefined ? { epoch } : {}),
    });
    this.detach = this.options.onConsumer?.(consumer);
    return consumer;
  }
}
