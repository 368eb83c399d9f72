import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import { expect } from 'vitest';
import type { ScheduleFirerCounters } from '../../src/schedules/firer.js';
import type { Ledger } from '../../src/ledger/ledger.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const ENTRY = join('test', 'support', 'child-schedule-firer.ts');

export interface FirerReplicaConfig {
  dbUrl: string;
  redisUrl?: string;
  keyPrefix?: string;
  checkMs?: number;
  clockOffsetMs?: number;
}

/** A schedule firer in a child process (test/support/child-schedule-firer.ts). */
export class FirerReplica {
  readonly proc: ChildProcess;
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  /** Its counters, reported after a SIGTERM stop. */
  counters: ScheduleFirerCounters | undefined;
  private stderr = '';

  constructor(config: FirerReplicaConfig) {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      LANEWAKE_LOG_LEVEL: process.env.LANEWAKE_LOG_LEVEL ?? 'error',
      LW_DB_URL: config.dbUrl,
      LW_CHECK_MS: String(config.checkMs ?? 1000),
      LW_CLOCK_OFFSET_MS: String(config.clockOffsetMs ?? 0),
    };
    if (config.redisUrl !== undefined) env.LW_REDIS_URL = config.redisUrl;
    if (config.keyPrefix !== undefined) env.LW_KEY_PREFIX = config.keyPrefix;
    delete env.VITEST;
    delete env.VITEST_WORKER_ID;
    delete env.VITEST_POOL_ID;
    this.proc = spawn(process.execPath, ['--import', 'tsx', ENTRY], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.exited = new Promise((res) => this.proc.once('exit', () => res()));
    this.proc.stderr?.setEncoding('utf8');
    this.proc.stderr?.on('data', (chunk: string) => {
      this.stderr = (this.stderr + chunk).slice(-20_000);
    });
    let markReady: () => void = () => undefined;
    let failReady: (e: Error) => void = () => undefined;
    this.ready = new Promise<void>((res, rej) => {
      markReady = res;
      failReady = rej;
    });
    this.ready.catch(() => undefined);
    void this.exited.then(() => failReady(new Error(`firer replica exited before ready: ${this.stderr}`)));
    let buffered = '';
    this.proc.stdout?.setEncoding('utf8');
    this.proc.stdout?.on('data', (chunk: string) => {
      buffered += chunk;
      for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
        const line = buffered.slice(0, nl).trim();
        buffered = buffered.slice(nl + 1);
        if (!line.startsWith('{')) continue;
        const event = JSON.parse(line) as { event: string; counters?: ScheduleFirerCounters };
        if (event.event === 'ready') markReady();
        if (event.event === 'stopped') this.counters = event.counters;
      }
    });
  }

  get running(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** SIGTERM, and its counters once it has stopped. */
  async stop(): Promise<ScheduleFirerCounters> {
    if (this.running) this.proc.kill('SIGTERM');
    await this.exited;
    if (!this.counters) throw new Error(`firer replica reported no counters: ${this.stderr}`);
    return this.counters;
  }

  async kill(): Promise<void> {
    if (this.running) this.proc.kill('SIGKILL');
    await this.exited;
  }
}

/** A schedule's fired items: fire time (from the key) and the ledger's creation time, by fire time. */
export async function firedItems(
  ledger: Ledger,
  queue: string,
  name: string,
): Promise<{ fireMs: number; createdAt: Date; key: string }[]> {
  const r = await sql<{
    idempotency_key: string;
    created_at: Date;
  }>`SELECT idempotency_key, created_at FROM ${ledger.tables.items}
    WHERE queue = ${queue} AND idempotency_key LIKE ${`${name}:%`}`.execute(ledger.db);
  return r.rows
    .map((x) => ({
      key: x.idempotency_key,
      fireMs: Number(x.idempotency_key.slice(name.length + 1)),
      createdAt: x.created_at,
    }))
    .sort((a, b) => a.fireMs - b.fireMs);
}

/**
 * Every fire time of an interval schedule from its first to its last made
 * one item: none missing, none twice; and none made before its fire time on
 * the ledger's clock.
 */
export function expectEveryFireOnce(fires: readonly { fireMs: number; createdAt: Date }[], everyMs: number): void {
  expect(fires.length).toBeGreaterThan(0);
  const first = fires[0]!.fireMs;
  expect(fires.map((f) => f.fireMs)).toEqual(fires.map((_, i) => first + i * everyMs));
  for (const f of fires) expect(f.createdAt.getTime()).toBeGreaterThanOrEqual(f.fireMs);
}
