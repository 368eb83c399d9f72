import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { ConsumerCounters } from '../../src/consumer/consumer.js';
import { waitFor } from './ledger.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CHILD_ENTRY = join('test', 'support', 'child-consumer.ts');

export interface ChildConsumerConfig {
  dbUrl: string;
  redisUrl: string;
  keyPrefix: string;
  queue: string;
  name: string;
  concurrency?: number;
  leaseMs?: number;
  pollIntervalMs?: number;
  mode?: 'effects' | 'hang' | 'steps-hang' | 'outbox';
  /** 'outbox': the follow-up items' queue, and where the first attempt halts (support/outbox-handler.ts). */
  followQueue?: string;
  outboxStop?: string;
  /** Fixed work time per item ('effects'); default a random 0–2 ms. */
  workMs?: number;
  drainTimeoutMs?: number;
}

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A consumer running in a child process (test/support/child-consumer.ts). */
export class ChildConsumer {
  readonly proc: ChildProcess;
  readonly ready: Promise<void>;
  readonly exited: Promise<ChildExit>;
  /** Counters the child reported after a graceful stop. */
  stoppedCounters: ConsumerCounters | undefined;
  /** Every event line the child wrote, in order. */
  readonly events: Record<string, unknown>[] = [];
  private stderr = '';

  constructor(readonly config: ChildConsumerConfig) {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      LANEWAKE_LOG_LEVEL: process.env.LANEWAKE_LOG_LEVEL ?? 'warn',
      LW_DB_URL: config.dbUrl,
      LW_REDIS_URL: config.redisUrl,
      LW_KEY_PREFIX: config.keyPrefix,
      LW_QUEUE: config.queue,
      LW_NAME: config.name,
      LW_CONCURRENCY: String(config.concurrency ?? 8),
      LW_LEASE_MS: String(config.leaseMs ?? 30_000),
      LW_POLL_MS: String(config.pollIntervalMs ?? 1000),
      LW_MODE: config.mode ?? 'effects',
      LW_DRAIN_MS: String(config.drainTimeoutMs ?? 10_000),
    };
    if (config.workMs !== undefined) env.LW_WORK_MS = String(config.workMs);
    if (config.followQueue !== undefined) env.LW_FOLLOW_QUEUE = config.followQueue;
    if (config.outboxStop !== undefined) env.LW_OUTBOX_STOP = config.outboxStop;
    // Not in the vitest worker's own environment: the child is a plain Node process.
    delete env.VITEST;
    delete env.VITEST_WORKER_ID;
    delete env.VITEST_POOL_ID;
    this.proc = spawn(process.execPath, ['--import', 'tsx', CHILD_ENTRY], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.exited = new Promise((res) => this.proc.once('exit', (code, signal) => res({ code, signal })));
    this.proc.stderr?.setEncoding('utf8');
    this.proc.stderr?.on('data', (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-20_000);
    });
    let buffered = '';
    let markReady: () => void = () => undefined;
    let failReady: (e: Error) => void = () => undefined;
    this.ready = new Promise<void>((res, rej) => {
      markReady = res;
      failReady = rej;
    });
    this.ready.catch(() => undefined);
    void this.exited.then((e) =>
      failReady(new Error(`child ${config.name} exited before ready (${e.code ?? e.signal}): ${this.stderr}`)),
    );
    this.proc.stdout?.setEncoding('utf8');
    this.proc.stdout?.on('data', (chunk: string) => {
      buffered += chunk;
      for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
        const line = buffered.slice(0, nl).trim();
        buffered = buffered.slice(nl + 1);
        if (!line.startsWith('{')) continue;
        const event = JSON.parse(line) as { event: string; counters?: ConsumerCounters };
        this.events.push(event);
        if (event.event === 'ready') markReady();
        if (event.event === 'stopped') this.stoppedCounters = event.counters;
      }
    });
  }

  get name(): string {
    return this.config.name;
  }

  get stderrTail(): string {
    return this.stderr;
  }

  get running(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Waits for the child to be consuming, failing after `timeoutMs`. */
  async waitReady(timeoutMs = 30_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.ready,
        new Promise<never>((_, rej) => {
          timer = setTimeout(
            () => rej(new Error(`child ${this.name} not ready after ${timeoutMs} ms: ${this.stderr}`)),
            timeoutMs,
          );
        }),
      ]);
    } finally {
      if (timer) clearTimeout(timer);
    }
  }

  /** SIGTERM and wait for the exit (SIGKILL after `timeoutMs`). */
  async terminate(timeoutMs = 30_000): Promise<ChildExit> {
    if (!this.running) return this.exited;
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), timeoutMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  async kill(): Promise<ChildExit> {
    if (!this.running) return this.exited;
    this.proc.kill('SIGKILL');
    return this.exited;
  }
}

/** A TCP port nothing listens on right now. */
export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const server = createServer();
    server.once('error', rej);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => (port > 0 ? res(port) : rej(new Error('no port'))));
    });
  });
}

/**
 * A redis-server of the test's own on its own port (never the shared one on
 * 6379), which the test may kill and start again on the same port.
 */
export class PrivateRedis {
  private proc: ChildProcess | undefined;
  private readonly dir = mkdtempSync(join(tmpdir(), 'lanewake-redis-'));

  private constructor(readonly port: number) {}

  static async start(): Promise<PrivateRedis> {
    const r = new PrivateRedis(await freePort());
    await r.start();
    return r;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  async start(): Promise<void> {
    if (this.running) throw new Error('private redis already running');
    const proc = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'no',
        '--dir',
        this.dir,
      ],
      { stdio: 'ignore' },
    );
    this.proc = proc;
    await waitFor(
      async () =>
        (await this.ping()) || (proc.exitCode !== null ? Promise.reject(new Error('redis-server exited')) : undefined),
      10_000,
      `redis-server on ${this.port}`,
    );
  }

  /** SIGKILL: no shutdown handshake, clients see their sockets drop. */
  async kill(): Promise<void> {
    const proc = this.proc;
    if (!proc || !this.running) return;
    const exited = new Promise<void>((res) => proc.once('exit', () => res()));
    proc.kill('SIGKILL');
    await exited;
  }

  /** SIGSTOP: it answers nothing and closes nothing, as a stalled or cut-off server; thaw() (SIGCONT) resumes it. */
  freeze(): void {
    this.proc?.kill('SIGSTOP');
  }

  thaw(): void {
    this.proc?.kill('SIGCONT');
  }

  async destroy(): Promise<void> {
    this.thaw();
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private async ping(): Promise<boolean> {
    const c = new Redis(this.url, {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      enableOfflineQueue: false,
    });
    c.on('error', () => undefined);
    try {
      await c.connect();
      return (await c.ping()) === 'PONG';
    } catch {
      return false;
    } finally {
      c.disconnect();
    }
  }
}
